package shield

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/shield/config"
)

// Reset puts an unpinned shield back in the state Load left it in, with
// limits l (zero: DefaultLimits) and the ephemeral ports Load was given:
// no tracked source, every counter zero, empty lists and own addresses, the
// program's writable variables (the virtual clock among them) zero, full
// admission buckets and a fresh configuration. The loaded program is kept:
// verifying it again costs seconds a load in a VM under TCG, where the
// simulator runs hundreds of independent cases (shield/datapath). What it
// leaves is what Load leaves but for three things no reader sees: the hash
// keys (the table is empty, so no entry was placed with them), the rules'
// hit counters (user space zeroes a rule before giving it to an entry:
// rule_hits), and the inner map the last configuration swap replaced (kept
// until the next swap, as after any change).
//
// Nothing may use s while Reset runs, and a capture running is stopped. A
// pinned shield is refused: its maps are the service's state, shared with
// the program attached.
func (s *Shield) Reset(l config.Limits) error {
	if s.pinPath != "" {
		return fmt.Errorf("reset: the shield is pinned at %s", s.pinPath)
	}
	if l.IsZero() {
		l = config.DefaultLimits()
	} else if err := l.Validate(); err != nil {
		return config.Invalid(fmt.Errorf("limits: %w", err))
	}
	l = l.WithDefaults()
	if err := l.CheckTick(s.clock, s.tickNs); err != nil {
		return config.Invalid(fmt.Errorf("limits: %w", err))
	}
	s.StopCapture()
	if err := s.clearMaps(); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	s.filterMu.Lock()
	defer s.filterMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clockNote, s.recovered, s.migrated = "", nil, nil
	s.limits, s.eph, s.gen, s.filter = config.Limits{}, s.loadEph, 0, 0
	s.afterFilterWalk = nil
	if err := s.loadSnapshots(); err != nil {
		return err
	}
	if err := s.loadRules(); err != nil {
		return err
	}
	if err := s.start(l); err != nil {
		return err
	}
	return s.settleLists()
}

// clearMaps empties or zeroes every map of the program but the
// configuration's outer array (start swaps a new one in), the capture's
// perf buffer and the rules' hit counters (see Reset), and zeroes its
// writable variables.
func (s *Shield) clearMaps() error {
	var errs []error
	maps := reflect.ValueOf(&s.objs.ShieldMaps).Elem()
	for i := range maps.NumField() {
		m, ok := maps.Field(i).Interface().(*ebpf.Map)
		if !ok || m == nil || m == s.objs.RuleHits {
			continue
		}
		if err := clearMap(m); err != nil {
			errs = append(errs, fmt.Errorf("clear %s: %w", maps.Type().Field(i).Name, err))
		}
	}
	vars := reflect.ValueOf(&s.objs.ShieldVariables).Elem()
	for i := range vars.NumField() {
		v, ok := vars.Field(i).Interface().(*ebpf.Variable)
		if !ok || v == nil || v.ReadOnly() {
			continue
		}
		if err := v.Set(make([]byte, v.Size())); err != nil {
			errs = append(errs, fmt.Errorf("zero %s: %w", vars.Type().Field(i).Name, err))
		}
	}
	return errors.Join(errs...)
}

// clearMap zeroes an array's values (through a mapping when the array is
// BPF_F_MMAPABLE: the sources table and the presence filter are MiBs)
// and deletes every key of a hash, trie or program array.
func clearMap(m *ebpf.Map) error {
	switch m.Type() {
	case ebpf.Array:
		if m.Flags()&unix.BPF_F_MMAPABLE != 0 {
			size := int(m.MaxEntries()) * int((m.ValueSize()+7)&^7)
			b, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				return fmt.Errorf("map: %w", err)
			}
			clear(b)
			return unix.Munmap(b)
		}
		zero := make([]byte, m.ValueSize())
		for i := range m.MaxEntries() {
			if err := m.Put(i, zero); err != nil {
				return err
			}
		}
	case ebpf.PerCPUArray:
		n, err := ebpf.PossibleCPU()
		if err != nil {
			return err
		}
		zero := make([][]byte, n)
		for i := range zero {
			zero[i] = make([]byte, m.ValueSize())
		}
		for i := range m.MaxEntries() {
			if err := m.Put(i, zero); err != nil {
				return err
			}
		}
	case ebpf.Hash, ebpf.LPMTrie, ebpf.ProgramArray:
		var keys [][]byte
		var k []byte
		var err error
		for k, err = m.NextKeyBytes(nil); err == nil && k != nil; k, err = m.NextKeyBytes(k) {
			keys = append(keys, k)
		}
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return err
			}
		}
	}
	return nil
}
