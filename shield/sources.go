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
	// Limited says the source's next packet would be dropped: its bucket,
	// refilled to the program's clock as the program would refill it,
	// holds less than one packet's credit.
	Limited bool `json:"limited"`
}

func sourceKey(a netip.Addr) bpf.ShieldSrcKey {
	return bpf.ShieldSrcKey{Addr: a.Unmap().As16()}
}

func sourceOf(k bpf.ShieldSrcKey, v bpf.ShieldSource, limited func(*bpf.ShieldBucket) bool) Source {
	return Source{
		Addr:    netip.AddrFrom16(k.Addr).Unmap(),
		Passed:  v.Passed,
		Dropped: v.Dropped,
		Limited: limited(&v.Bucket),
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
	return sourceOf(k, v, s.limitedNow()), true, nil
}
