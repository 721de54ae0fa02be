package lb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// ApplyError is a change that was valid but could not be written to the
// maps (the kernel refused a write: memory, a map gone). The balancer then
// wrote its previous configuration back; Restored says whether that worked
// (if not, the next change rewrites every table). Not the request's fault.
type ApplyError struct {
	Err      error
	Restored bool
}

func (e *ApplyError) Error() string {
	if e.Restored {
		return fmt.Sprintf("apply the change: %v (the previous configuration was restored)", e.Err)
	}
	return fmt.Sprintf("apply the change: %v (and restoring the previous configuration failed: the maps may be half-changed until the next change)", e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// commit makes next the configuration (write); when a map write fails, the
// maps may be half-changed: it writes the previous configuration back
// whole (every table, key and backend) and drops what the failed write
// added, and returns an *ApplyError. Callers hold l.mu.
func (l *LB) commit(next map[lbconf.ServiceKey]*service) error {
	firstNew := l.nextBE
	err := l.write(next)
	if err == nil {
		return nil
	}
	// Backends the failed write created: no table of the old
	// configuration names them; a restart must not read them back.
	var errs []error
	for id := firstNew; id < l.nextBE; id++ {
		if derr := l.objs.Backends.Delete(id); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
			errs = append(errs, derr)
		}
	}
	// Source ranges the failed write added (the old ones are written
	// back below).
	for k, s := range next {
		if s.id == 0 {
			continue
		}
		var had []netip.Prefix
		if old, ok := l.services[k]; ok {
			had = old.ranges
		}
		for _, p := range s.ranges {
			if slices.Contains(had, p) {
				continue
			}
			if derr := l.objs.Ranges.Delete(rangeKey(s.id, p)); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
				errs = append(errs, derr)
			}
		}
	}
	// Services the failed write added: key, then table.
	for k, s := range next {
		if _, ok := l.services[k]; ok || s.id == 0 {
			continue
		}
		if derr := l.objs.Services.Delete(svcKey(k)); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
			errs = append(errs, derr)
		}
		if derr := l.objs.Tables.Delete(s.id); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
			errs = append(errs, derr)
		}
	}
	l.stale = true
	if rerr := l.write(l.services); rerr != nil {
		errs = append(errs, rerr)
	}
	for i := range l.ids {
		l.ids[i] = false
	}
	for _, s := range l.services {
		l.ids[s.id] = true
	}
	if rerr := errors.Join(errs...); rerr != nil {
		return &ApplyError{Err: errors.Join(err, fmt.Errorf("restore: %w", rerr))}
	}
	return &ApplyError{Err: err, Restored: true}
}

// writeFault, when set (tests), is asked before each map write of a change
// and fails it with what it returns.
func (l *LB) fault(what string) error {
	if l.writeFault == nil {
		return nil
	}
	return l.writeFault(what)
}

// write makes next the configuration: ids for what is new, then the maps,
// in an order where a connect() racing the change sees the old state or the
// new one per service: backends before the tables naming them, a new
// service's table before its key, a removed service's key before its table,
// backends after the last table naming them is gone. next was validated.
// With l.stale every backend, table and key is written.
func (l *LB) write(next map[lbconf.ServiceKey]*service) error {
	var newIDs []uint32
	for _, k := range lbconf.SortedKeys(next) {
		s := next[k]
		if old, ok := l.services[k]; ok {
			s.id = old.id
		} else {
			id, err := l.allocID(newIDs)
			if err != nil {
				return err
			}
			s.id = id
			newIDs = append(newIDs, id)
		}
		for i := range s.backends {
			if s.backends[i].id == 0 {
				s.backends[i].id = l.nextBE
				l.nextBE++
			}
		}
	}

	// New backends, and those whose draining or weight changed (the
	// entry records them for a restart that reads the state back).
	for _, k := range lbconf.SortedKeys(next) {
		s := next[k]
		for _, b := range s.backends {
			if old, ok := l.backendByID(b.id); ok && old == b && !l.stale {
				continue
			}
			if err := l.fault("backend"); err != nil {
				return fmt.Errorf("write backend %s: %w", b.addr, err)
			}
			if err := l.objs.Backends.Put(b.id, backendValue(b, s.id)); err != nil {
				return fmt.Errorf("write backend %s: %w", b.addr, err)
			}
			// Its socket count, from zero (kept when it exists).
			if err := l.objs.BeSockets.Update(b.id, int64(0), ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
				return fmt.Errorf("write backend %s: %w", b.addr, err)
			}
		}
	}
	// Counters of new ids start at zero.
	for _, id := range newIDs {
		if err := l.zeroCounters(id); err != nil {
			return err
		}
	}
	// Changed and new services: ranges added, table, key, ranges
	// removed. While ranges change, a connect() sees the old set, the
	// union of both, or the new set.
	for _, k := range lbconf.SortedKeys(next) {
		s := next[k]
		old, existed := l.services[k]
		if existed && !l.stale && old.mode == s.mode && slices.Equal(old.backends, s.backends) && slices.Equal(old.ranges, s.ranges) && old.affinity == s.affinity {
			continue
		}
		for _, p := range s.ranges {
			if err := l.fault("range"); err != nil {
				return fmt.Errorf("write source range %s of %s: %w", p, k, err)
			}
			if err := l.objs.Ranges.Put(rangeKey(s.id, p), uint8(1)); err != nil {
				return fmt.Errorf("write source range %s of %s: %w", p, k, err)
			}
		}
		if !existed || l.stale || old.mode != s.mode || !slices.Equal(old.backends, s.backends) {
			if err := l.writeTable(s); err != nil {
				return fmt.Errorf("service %s: %w", k, err)
			}
		}
		if err := l.fault("service"); err != nil {
			return fmt.Errorf("write service %s: %w", k, err)
		}
		v := bpf.LbSvc{Id: s.id, Mode: modeValue(s.mode), AffinityMs: uint32(s.affinity / time.Millisecond)}
		if len(s.ranges) > 0 {
			v.Flags = svcFlagRanges
		}
		if err := l.objs.Services.Put(svcKey(k), v); err != nil {
			return fmt.Errorf("write service %s: %w", k, err)
		}
		if existed {
			if err := l.deleteRanges(old.id, old.ranges, s.ranges); err != nil {
				return fmt.Errorf("service %s: %w", k, err)
			}
		}
	}
	// Removed services: key, then table.
	for _, k := range lbconf.SortedKeys(l.services) {
		if _, ok := next[k]; ok {
			continue
		}
		id := l.services[k].id
		if err := l.fault("delete service"); err != nil {
			return fmt.Errorf("delete service %s: %w", k, err)
		}
		if err := l.objs.Services.Delete(svcKey(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete service %s: %w", k, err)
		}
		if err := l.objs.Tables.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete table of %s: %w", k, err)
		}
		if err := l.deleteRanges(id, l.services[k].ranges, nil); err != nil {
			return fmt.Errorf("service %s: %w", k, err)
		}
		l.ids[id] = false
	}
	// Backends no table names any more.
	live := map[uint32]bool{}
	for _, s := range next {
		for _, b := range s.backends {
			live[b.id] = true
		}
	}
	var gone []uint32
	for _, s := range l.services {
		for _, b := range s.backends {
			if !live[b.id] {
				if err := l.objs.Backends.Delete(b.id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("delete backend %s: %w", b.addr, err)
				}
				gone = append(gone, b.id)
			}
		}
	}
	for _, id := range newIDs {
		l.ids[id] = true
	}
	l.services = next
	l.stale = false
	// Sockets still on removed backends: terminated, or left open.
	l.terminate(gone)
	return nil
}

// deleteRanges deletes service id's ranges in had that keep does not hold.
func (l *LB) deleteRanges(id uint32, had, keep []netip.Prefix) error {
	for _, p := range had {
		if slices.Contains(keep, p) {
			continue
		}
		if err := l.objs.Ranges.Delete(rangeKey(id, p)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete source range %s: %w", p, err)
		}
	}
	return nil
}

// svcFlagRanges is SVC_F_RANGES in bpf/lb.c.
const svcFlagRanges = 1

// rangeKey is a source range's LPM key: the service id (big endian, all
// 32 bits matched) and the prefix as IPv6 (IPv4 mapped, 96 bits more).
func rangeKey(id uint32, p netip.Prefix) bpf.LbRangeKey {
	var be [4]byte
	binary.BigEndian.PutUint32(be[:], id)
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return bpf.LbRangeKey{Prefixlen: uint32(32 + bits), SvcId: binary.NativeEndian.Uint32(be[:]),
		Addr: addrValue(p.Addr().As16())}
}

func (l *LB) backendByID(id uint32) (backend, bool) {
	for _, s := range l.services {
		for _, b := range s.backends {
			if b.id == id {
				return b, true
			}
		}
	}
	return backend{}, false
}

func (l *LB) allocID(taken []uint32) (uint32, error) {
	for id := uint32(1); id <= lbconf.MaxServices; id++ {
		if !l.ids[id] && !slices.Contains(taken, id) {
			return id, nil
		}
	}
	return 0, fmt.Errorf("no free service id (%d services fit)", lbconf.MaxServices)
}

// writeTable builds the service's choice table in a fresh inner map and
// swaps it in; with no active backend it removes the table, so connect()
// is refused.
func (l *LB) writeTable(s *service) error {
	act := s.active()
	if len(act) == 0 {
		if err := l.objs.Tables.Delete(s.id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete table: %w", err)
		}
		return nil
	}
	var slots []uint32
	if s.mode == lbconf.Maglev {
		slots = maglevTable(act, int(l.tableSize))
	} else {
		slots = weightedTable(act, int(l.tableSize))
	}
	inner, err := ebpf.NewMap(l.tableSpec)
	if err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	defer inner.Close()
	keys := make([]uint32, len(slots))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, slots, nil); err != nil {
		// Array batch operations exist since 5.6; fall back anyway.
		for i, v := range slots {
			if err := inner.Put(uint32(i), v); err != nil {
				return fmt.Errorf("fill table: %w", err)
			}
		}
	}
	if err := l.fault("table"); err != nil {
		return fmt.Errorf("swap table: %w", err)
	}
	if err := l.objs.Tables.Put(s.id, inner); err != nil {
		return fmt.Errorf("swap table: %w", err)
	}
	return nil
}

// addrValue is the program's address layout: IPv6, or IPv4 mapped as
// ::ffff:a.b.c.d, in network byte order.
func addrValue(a16 [16]byte) bpf.LbAddr {
	var v bpf.LbAddr
	for i := range v.W {
		// Bytes in network order, as the program loads them.
		v.W[i] = binary.NativeEndian.Uint32(a16[4*i:])
	}
	return v
}

// netPort is a port as the program stores it: network byte order, read as
// a little-endian uint16.
func netPort(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

func binaryPutNative(b []byte, w uint32) { binary.NativeEndian.PutUint32(b, w) }

// backendValue is a backend's map entry. The programs read only the
// address and port; the two bytes after them (padding to the programs)
// carry the Go side's bookkeeping, so a restart can read the services back
// from pinned maps: the service id (1..255) and whether it is draining.
func backendValue(b backend, svcID uint32) bpf.LbBackend {
	v := bpf.LbBackend{Addr: addrValue(b.addr.Addr().As16()), Port: netPort(b.addr.Port())}
	v.Weight = lbconf.WeightOf(b.weight)
	v.Owner = uint8(svcID)
	// Bit 0 draining, bit 1 quarantined: the program keeps no affinity
	// to either.
	if b.draining {
		v.Draining |= 1
	}
	if b.quarantined {
		v.Draining |= 2
	}
	return v
}

func svcKey(k lbconf.ServiceKey) bpf.LbSvcKey {
	return bpf.LbSvcKey{Addr: addrValue(k.VIP.As16()), Port: netPort(k.Port), Proto: protoNumber(k.Proto)}
}

func modeValue(m lbconf.Mode) uint8 {
	if m == lbconf.Maglev {
		return 1 // MODE_MAGLEV
	}
	return 0 // MODE_RANDOM
}
