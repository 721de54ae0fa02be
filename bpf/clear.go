package bpf

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Clear puts loaded objects back as a load leaves them, without loading
// (and verifying) again: every map among the *ebpf.Map fields of the
// struct maps points to (bpf2go's XMaps) but those in skip is emptied or
// zeroed (ClearMap), and every writable *ebpf.Variable among the fields of
// the struct vars points to (XVariables) is zeroed: the programs here have
// no writable variable with another initial value.
func Clear(maps, vars any, skip ...*ebpf.Map) error {
	var errs []error
	mv := reflect.ValueOf(maps).Elem()
	for i := range mv.NumField() {
		m, ok := mv.Field(i).Interface().(*ebpf.Map)
		if !ok || m == nil || slices.Contains(skip, m) {
			continue
		}
		if err := ClearMap(m); err != nil {
			errs = append(errs, fmt.Errorf("clear %s: %w", mv.Type().Field(i).Name, err))
		}
	}
	vv := reflect.ValueOf(vars).Elem()
	for i := range vv.NumField() {
		v, ok := vv.Field(i).Interface().(*ebpf.Variable)
		if !ok || v == nil || v.ReadOnly() {
			continue
		}
		if err := v.Set(make([]byte, v.Size())); err != nil {
			errs = append(errs, fmt.Errorf("zero %s: %w", vv.Type().Field(i).Name, err))
		}
	}
	return errors.Join(errs...)
}

// ClearMap zeroes an array's values (through a mapping when the array is
// BPF_F_MMAPABLE: the shield's sources table and presence filter are
// MiBs) and deletes every key of a hash, trie, sockhash, sockmap or
// program array. Other types are refused: what they hold is not a map's
// content to reset (an array of maps, a perf buffer).
func ClearMap(m *ebpf.Map) error {
	switch m.Type() {
	case ebpf.Array, ebpf.PerCPUArray:
		if m.Type() == ebpf.Array && m.Flags()&unix.BPF_F_MMAPABLE != 0 {
			size := int(m.MaxEntries()) * int((m.ValueSize()+7)&^7)
			b, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				return fmt.Errorf("map: %w", err)
			}
			clear(b)
			return unix.Munmap(b)
		}
		var zero any = make([]byte, m.ValueSize())
		if m.Type() == ebpf.PerCPUArray {
			n, err := ebpf.PossibleCPU()
			if err != nil {
				return err
			}
			per := make([][]byte, n)
			for i := range per {
				per[i] = make([]byte, m.ValueSize())
			}
			zero = per
		}
		for i := range m.MaxEntries() {
			if err := m.Put(i, zero); err != nil {
				return err
			}
		}
	case ebpf.Hash, ebpf.LPMTrie, ebpf.SockHash, ebpf.SockMap, ebpf.ProgramArray:
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
	default:
		return fmt.Errorf("map type %v: no reset", m.Type())
	}
	return nil
}
