package lb

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// adoptLinks replaces the program of every pinned link in dir by this
// LB's, all or none: on a failure the links already changed get their old
// program back. The links become this LB's.
func (l *LB) adoptLinks(dir string) error {
	l.linkMu.Lock()
	defer l.linkMu.Unlock()
	type adopted struct {
		lk  link.Link
		old *ebpf.Program
	}
	var done []adopted
	undo := func() {
		for _, a := range done {
			a.lk.Update(a.old)
			a.old.Close()
			a.lk.Close()
		}
	}
	for _, a := range l.attachTypes() {
		p := filepath.Join(dir, a.pin)
		lk, err := link.LoadPinnedLink(p, nil)
		if err != nil {
			undo()
			return fmt.Errorf("load pinned link %s: %w", p, err)
		}
		info, err := lk.Info()
		var old *ebpf.Program
		if err == nil {
			old, err = ebpf.NewProgramFromID(info.Program)
		}
		if err == nil {
			if err = lk.Update(a.prog); err != nil {
				old.Close()
			}
		}
		if err != nil {
			lk.Close()
			undo()
			return fmt.Errorf("replace the program of pinned link %s: %w", p, err)
		}
		done = append(done, adopted{lk, old})
	}
	for _, a := range done {
		a.old.Close()
		l.links = append(l.links, a.lk)
	}
	return nil
}

// readState reads the services back from the pinned maps: keys and modes
// from services, backends (with their service and draining flag) from
// backends, in the order they were added (by id). Entries a crash left
// half-made are not read (a backend of no service, a table of no service)
// and go at the next commit; that commit rewrites every table.
func (l *LB) readState() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	byID := map[uint32]lbconf.ServiceKey{}
	var (
		k bpf.LbSvcKey
		v bpf.LbSvc
	)
	it := l.objs.Services.Iterate()
	for it.Next(&k, &v) {
		var a16 [16]byte
		for i, w := range k.Addr.W {
			binaryPutNative(a16[4*i:], w)
		}
		proto := lbconf.TCP
		if k.Proto == protoNumber(lbconf.UDP) {
			proto = lbconf.UDP
		}
		key := lbconf.ServiceKey{VIP: netip.AddrFrom16(a16).Unmap(), Port: netPort(k.Port), Proto: proto}
		if v.Id == 0 || v.Id > lbconf.MaxServices {
			continue
		}
		mode := lbconf.Random
		if v.Mode == modeValue(lbconf.Maglev) {
			mode = lbconf.Maglev
		}
		l.services[key] = &service{id: v.Id, mode: mode, affinity: time.Duration(v.AffinityMs) * time.Millisecond}
		l.ids[v.Id] = true
		byID[v.Id] = key
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read pinned services: %w", err)
	}
	var (
		id  uint32
		b   bpf.LbBackend
		ids []uint32
		bes = map[uint32]bpf.LbBackend{}
	)
	bit := l.objs.Backends.Iterate()
	for bit.Next(&id, &b) {
		ids = append(ids, id)
		bes[id] = b
	}
	if err := bit.Err(); err != nil {
		return fmt.Errorf("read pinned backends: %w", err)
	}
	slices.Sort(ids)
	var orphans []uint32
	for _, id := range ids {
		b := bes[id]
		if id >= l.nextBE {
			l.nextBE = id + 1
		}
		key, ok := byID[uint32(b.Owner)]
		if !ok {
			orphans = append(orphans, id)
			continue
		}
		var a16 [16]byte
		for i, w := range b.Addr.W {
			binaryPutNative(a16[4*i:], w)
		}
		s := l.services[key]
		s.backends = append(s.backends, backend{id: id,
			addr: netip.AddrPortFrom(netip.AddrFrom16(a16).Unmap(), netPort(b.Port)), draining: b.Draining&1 != 0, quarantined: b.Draining&2 != 0,
			weight: lbconf.WeightOf(b.Weight)})
	}
	// Source ranges, by service id; those of no service go.
	var (
		rk     bpf.LbRangeKey
		rv     uint8
		stray  []bpf.LbRangeKey
		ranges = map[uint32][]netip.Prefix{}
	)
	rit := l.objs.Ranges.Iterate()
	for rit.Next(&rk, &rv) {
		var be [4]byte
		binary.NativeEndian.PutUint32(be[:], rk.SvcId)
		sid := binary.BigEndian.Uint32(be[:])
		var a16 [16]byte
		for i, w := range rk.Addr.W {
			binaryPutNative(a16[4*i:], w)
		}
		a := netip.AddrFrom16(a16)
		bits := int(rk.Prefixlen) - 32
		if a.Is4In6() {
			a, bits = a.Unmap(), bits-96
		}
		p, err := a.Prefix(bits)
		if _, ok := byID[sid]; !ok || err != nil {
			stray = append(stray, rk)
			continue
		}
		ranges[sid] = append(ranges[sid], p)
	}
	if err := rit.Err(); err != nil {
		return fmt.Errorf("read pinned source ranges: %w", err)
	}
	for sid, ps := range ranges {
		slices.SortFunc(ps, func(a, b netip.Prefix) int {
			return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
		})
		l.services[byID[sid]].ranges = ps
	}
	for _, k := range stray {
		if err := l.objs.Ranges.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete a source range of no service: %w", err)
		}
	}
	// Tables first, then the backends they might name.
	var tid uint32
	var tids []uint32
	var inner *ebpf.Map
	tit := l.objs.Tables.Iterate()
	for tit.Next(&tid, &inner) {
		if _, ok := byID[tid]; !ok {
			tids = append(tids, tid)
		}
		inner.Close()
	}
	if err := tit.Err(); err != nil {
		return fmt.Errorf("read pinned tables: %w", err)
	}
	for _, t := range tids {
		if err := l.objs.Tables.Delete(t); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete a table of no service: %w", err)
		}
	}
	for _, o := range orphans {
		if err := l.objs.Backends.Delete(o); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete a backend of no service: %w", err)
		}
	}
	l.stale = true
	return nil
}

// ReplaceServices makes ss the whole set of services, as one change: those
// not in ss are removed, new ones added, the others get ss's mode and
// backends. A backend kept keeps its id (its place in a Maglev table) and
// whether it is draining. It returns the backends kept draining.
func (l *LB) ReplaceServices(ss []lbconf.Service) (draining []string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := map[lbconf.ServiceKey]*service{}
	draining, errs := l.addTo(next, ss)
	if err := errors.Join(append(errs, validateAll(next))...); err != nil {
		return nil, err
	}
	return draining, l.commit(next)
}
