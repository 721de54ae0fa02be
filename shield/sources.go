package shield

import (
	"fmt"
	"net/netip"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
)

// Source is one tracked source as the table holds it: an IPv4 address or
// an IPv6 prefix (Limits.KeyPrefix4 and KeyPrefix6).
type Source struct {
	Addr    netip.Addr   `json:"addr"`   // the first address of Prefix
	Prefix  netip.Prefix `json:"prefix"` // every address sharing the bucket
	Passed  uint64       `json:"passed"`
	Dropped uint64       `json:"dropped"`
	// Limited says the source's next packet would be dropped: its bucket,
	// refilled to the program's clock as the program would refill it,
	// holds less than one packet's credit.
	Limited bool `json:"limited"`
}

// sourcePrefix is the prefix a's bucket covers under limits l.
func sourcePrefix(a netip.Addr, l config.Limits) netip.Prefix {
	a = a.Unmap()
	bits := int(l.KeyPrefix6)
	if a.Is4() {
		bits = int(l.KeyPrefix4)
	}
	p, _ := a.Prefix(bits)
	return p
}

func sourceKey(a netip.Addr, l config.Limits) bpf.ShieldSrcKey {
	return bpf.ShieldSrcKey{Addr: netip.AddrFrom16(sourcePrefix(a, l).Addr().As16()).As16()}
}

func sourceOf(k bpf.ShieldSrcKey, v bpf.ShieldSource, limited func(*bpf.ShieldBucket) bool, l config.Limits) Source {
	a := netip.AddrFrom16(k.Addr).Unmap()
	return Source{
		Addr:    a,
		Prefix:  sourcePrefix(a, l),
		Passed:  v.Passed,
		Dropped: v.Dropped,
		Limited: limited(&v.Bucket),
	}
}

// Source looks up the source an address belongs to (its prefix, for
// IPv6); ok is false when it is not tracked. It reads the source's set
// through the table's mapping: no system call.
func (s *Shield) Source(a netip.Addr) (src Source, ok bool, err error) {
	l := s.Limits()
	k := sourceKey(a, l)
	sets, release, err := s.readTable()
	if err != nil {
		return Source{}, false, fmt.Errorf("look up source %s: %w", a, err)
	}
	set := &sets[setOf(hashOf(&k, &s.hashKeys), s.setBits)]
	var scratch, found bpf.ShieldSource
	ok = false
	visitSet(set, &scratch, func(sk *bpf.ShieldSrcKey, v *bpf.ShieldSource) {
		if !ok && *sk == k {
			found, ok = *v, true
		}
	})
	release()
	if !ok {
		return Source{}, false, nil
	}
	return sourceOf(k, found, s.limitedNow(), l), true, nil
}
