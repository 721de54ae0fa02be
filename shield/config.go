package shield

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// pinnedSeed reads the hash seed of the configuration pinned in dir; ok is
// false when none is pinned there (or dir is "").
func pinnedSeed(dir string) (seed uint64, ok bool, err error) {
	if dir == "" {
		return 0, false, nil
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.ShieldMapConfigMap), nil)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("open the pinned configuration: %w", err)
	}
	defer m.Close()
	cfg, ok, err := readConfigOf(m)
	return cfg.FilterSeed, ok, err
}

// readConfig returns the configuration in the outer map's slot, if any.
func (s *Shield) readConfig() (bpf.ShieldConfig, bool, error) { return readConfigOf(s.objs.ConfigMap) }

// readConfigOf returns the configuration in the slot of outer map m, if any.
func readConfigOf(m *ebpf.Map) (bpf.ShieldConfig, bool, error) {
	var cfg bpf.ShieldConfig
	var id ebpf.MapID
	if err := m.Lookup(uint32(0), &id); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return cfg, false, nil
		}
		return cfg, false, fmt.Errorf("read config slot: %w", err)
	}
	inner, err := ebpf.NewMapFromID(id)
	if err != nil {
		return cfg, false, fmt.Errorf("open config map %d: %w", id, err)
	}
	defer inner.Close()
	if err := inner.Lookup(uint32(0), &cfg); err != nil {
		return cfg, false, fmt.Errorf("read config: %w", err)
	}
	return cfg, true, nil
}

// publish writes l with the lists in force into a fresh inner map and
// swaps it in. Callers hold s.mu (or own s exclusively).
func (s *Shield) publish(l config.Limits) error {
	own, err := s.ownLocked()
	if err != nil {
		return err
	}
	return s.publishOwn(l, own)
}

// publishOwn is publish with own as the own addresses: the snapshots of
// the lists, own and s.gen must be what verdict generation s.gen holds.
func (s *Shield) publishOwn(l config.Limits, own []netip.Addr) error {
	inner, err := ebpf.NewMap(s.innerSpec)
	if err != nil {
		return fmt.Errorf("create config map: %w", err)
	}
	defer inner.Close()
	inline, looked := ownSplit(own)
	cfg := l.Config(s.listFlags(own), s.clock, inline)
	cfg.EphLo, cfg.EphHi = s.eph.Lo, s.eph.Hi
	// The lists as their snapshots hold them.
	var listed []netip.Prefix
	for _, l := range []lists.List{lists.AllowList, lists.DenyList} {
		if ps := s.snap[l].Load(); ps != nil {
			listed = append(listed, *ps...)
		}
	}
	cfg.Regions4, cfg.Regions6 = lists.Regions(listed, looked)
	cfg.Filter, cfg.FilterSeed = s.filter, s.filterSeed
	if err := inner.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	// Address-specific destinations first, then the config that looks
	// them up; stale ones go after the swap.
	stale, err := s.writeProtectedDsts(l.Protected)
	if err != nil {
		return err
	}
	staleAgg, err := s.writeAggregates(l.Aggregates)
	if err != nil {
		return err
	}
	var old *ebpf.Map
	var id ebpf.MapID
	if err := s.objs.ConfigMap.Lookup(uint32(0), &id); err == nil {
		old, _ = ebpf.NewMapFromID(id) // best effort: nil when it is gone already
	}
	if err := s.objs.ConfigMap.Put(uint32(0), inner); err != nil {
		if old != nil {
			old.Close()
		}
		return fmt.Errorf("swap config: %w", err)
	}
	if s.prev != nil {
		s.prev.Close()
	}
	s.prev = old
	s.limits = l
	for _, k := range stale {
		if err := s.objs.ProtectedDsts.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove protected destination: %w", err)
		}
	}
	for _, k := range staleAgg {
		if err := s.objs.Aggregates.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove aggregate limit: %w", err)
		}
	}
	return nil
}

// writeAggregates puts the aggregate limits of as in the aggregates map and
// returns the keys there that as no longer names. An entry whose limit is
// unchanged keeps its bucket (a publish of the lists changes nothing);
// a new or changed one starts full.
func (s *Shield) writeAggregates(as []config.Aggregate) ([]bpf.ShieldAggKey, error) {
	want := map[bpf.ShieldAggKey]bpf.ShieldAggregate{}
	for _, a := range as {
		want[a.AggKey()] = a.Value()
	}
	var stale []bpf.ShieldAggKey
	var k bpf.ShieldAggKey
	var v bpf.ShieldAggregate
	it := s.objs.Aggregates.Iterate()
	for it.Next(&k, &v) {
		w, ok := want[k]
		if !ok {
			stale = append(stale, k)
			continue
		}
		if w.Limit == v.Limit && w.Reserve == v.Reserve {
			delete(want, k)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read aggregate limits: %w", err)
	}
	for k, v := range want {
		if err := s.objs.Aggregates.Put(k, v); err != nil {
			return nil, fmt.Errorf("write aggregate limit: %w", err)
		}
	}
	return stale, nil
}

// aggregates reads the aggregate limits back.
func (s *Shield) aggregates() ([]config.Aggregate, error) {
	var out []config.Aggregate
	var k bpf.ShieldAggKey
	var v bpf.ShieldAggregate
	it := s.objs.Aggregates.Iterate()
	for it.Next(&k, &v) {
		d := config.Destination{Proto: counter.Proto(k.Proto), Port: k.Port<<8 | k.Port>>8}
		out = append(out, config.Aggregate{Destination: d, Rate: v.Limit.Rate, Burst: v.Limit.Cap / config.Token})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read aggregate limits: %w", err)
	}
	return out, nil
}

// writeProtectedDsts puts the address-specific destinations of ds in
// protected_dsts and returns the keys there that ds no longer names.
func (s *Shield) writeProtectedDsts(ds []config.Destination) ([]bpf.ShieldDstKey, error) {
	want := map[bpf.ShieldDstKey]bool{}
	for _, d := range ds {
		if d.Addr.IsValid() {
			want[d.DstKey()] = true
		}
	}
	var stale []bpf.ShieldDstKey
	var k bpf.ShieldDstKey
	var v uint8
	it := s.objs.ProtectedDsts.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
		delete(want, k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read protected destinations: %w", err)
	}
	for k := range want {
		if err := s.objs.ProtectedDsts.Put(k, uint8(1)); err != nil {
			return nil, fmt.Errorf("write protected destination: %w", err)
		}
	}
	return stale, nil
}

// protectedDsts reads the address-specific destinations back.
func (s *Shield) protectedDsts() ([]config.Destination, error) {
	var out []config.Destination
	var k bpf.ShieldDstKey
	var v uint8
	it := s.objs.ProtectedDsts.Iterate()
	for it.Next(&k, &v) {
		out = append(out, config.Destination{Proto: counter.Proto(k.Proto), Port: k.Port<<8 | k.Port>>8, Addr: netip.AddrFrom16(k.Addr).Unmap()})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read protected destinations: %w", err)
	}
	return out, nil
}

// start configures a freshly loaded collection: full admission buckets, so
// the first strangers are admitted whatever the clock reads, then the limits.
func (s *Shield) start(l config.Limits) error {
	bursts := [numClasses]uint64{classProtected: l.AdmissionBurst, classUnprotected: l.Unprotected.AdmissionBurst}
	for i, burst := range bursts {
		full := bpf.ShieldBucket{Credit: int64(burst * config.Token)}
		if err := s.objs.Admission.Put(uint32(i), full); err != nil {
			return fmt.Errorf("fill admission bucket: %w", err)
		}
	}
	return s.publish(l)
}
