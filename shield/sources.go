package shield

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"xdpshield/bpf"
)

// Source is one tracked source as the table holds it.
type Source struct {
	Addr    netip.Addr `json:"addr"`
	Passed  uint64     `json:"passed"`
	Dropped uint64     `json:"dropped"`
	// Limited says the bucket held less than one packet's credit when read.
	Limited bool `json:"limited"`
}

func sourceKey(a netip.Addr) bpf.ShieldSrcKey {
	return bpf.ShieldSrcKey{Addr: a.Unmap().As16()}
}

func sourceOf(k bpf.ShieldSrcKey, v bpf.ShieldSource) Source {
	return Source{
		Addr:    netip.AddrFrom16(k.Addr).Unmap(),
		Passed:  v.Passed,
		Dropped: v.Dropped,
		Limited: v.Bucket.Credit < token,
	}
}

// Source looks one address up; ok is false when it is not tracked.
func (s *Shield) Source(a netip.Addr) (src Source, ok bool, err error) {
	k := sourceKey(a)
	var v bpf.ShieldSource
	// LookupWithFlags would not touch the LRU order either; a plain lookup
	// from user space does not count as a use.
	if err := s.objs.Sources.Lookup(k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Source{}, false, nil
		}
		return Source{}, false, fmt.Errorf("look up source %s: %w", a, err)
	}
	return sourceOf(k, v), true, nil
}

// EachSource calls fn for every tracked source until fn returns false. The
// table changes while it is walked: an entry may be missed or seen twice.
func (s *Shield) EachSource(fn func(Source) bool) error {
	var k bpf.ShieldSrcKey
	var v bpf.ShieldSource
	it := s.objs.Sources.Iterate()
	for it.Next(&k, &v) {
		if !fn(sourceOf(k, v)) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("walk sources: %w", err)
	}
	return nil
}

// SourceCount counts the tracked sources by walking the table's keys.
func (s *Shield) SourceCount() (int, error) {
	n := 0
	var k, next bpf.ShieldSrcKey
	var cur any // nil: start at the first key
	for {
		if err := s.objs.Sources.NextKey(cur, &next); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return n, nil
			}
			return n, fmt.Errorf("count sources: %w", err)
		}
		n++
		k = next
		cur = k
	}
}

// ResetSources empties the sources table (for tests and operators).
func (s *Shield) ResetSources() error {
	var keys []bpf.ShieldSrcKey
	var k bpf.ShieldSrcKey
	it := s.objs.Sources.Iterate()
	var v bpf.ShieldSource
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("walk sources: %w", err)
	}
	for _, k := range keys {
		if err := s.objs.Sources.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete source: %w", err)
		}
	}
	return nil
}
