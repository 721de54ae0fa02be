package shield

import (
	"fmt"
	"net/netip"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/source"
)

// Source looks up the source an address belongs to (its prefix, for
// IPv6); ok is false when it is not tracked. It reads the source's set
// through the table's mapping: no system call.
func (s *Shield) Source(a netip.Addr) (src source.Source, ok bool, err error) {
	l := s.Limits()
	k := source.Key(a, l)
	sets, release, err := s.readTable()
	if err != nil {
		return source.Source{}, false, fmt.Errorf("look up source %s: %w", a, err)
	}
	set := &sets[source.SetOf(source.HashOf(&k, &s.hashKeys), s.setBits)]
	var scratch, found bpf.ShieldSource
	ok = false
	source.VisitSet(set, &scratch, func(sk *bpf.ShieldSrcKey, v *bpf.ShieldSource) {
		if !ok && *sk == k {
			found, ok = *v, true
		}
	})
	release()
	if !ok {
		return source.Source{}, false, nil
	}
	return source.Of(k, found, s.limitedNow(), l), true, nil
}
