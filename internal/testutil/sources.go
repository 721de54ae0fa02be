package testutil

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"xdpshield/bpf"
)

// FillSources writes n distinct sources (2001:db8::/96 plus a counter) into
// the shield's sources map m in batches, with spread passed and dropped
// counts so a ranking has work to do.
func FillSources(m *ebpf.Map, n int) error {
	const chunk = 50_000
	keys := make([]bpf.ShieldSrcKey, chunk)
	vals := make([]bpf.ShieldSource, chunk)
	base := netip.MustParseAddr("2001:db8::").As16()
	for i := 0; i < n; i += chunk {
		k := min(chunk, n-i)
		for j := range k {
			v := uint32(i + j)
			a := base
			a[12], a[13], a[14], a[15] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
			keys[j] = bpf.ShieldSrcKey{Addr: a}
			vals[j] = bpf.ShieldSource{Passed: uint64(v % 1000), Dropped: uint64(v*2654435761) % 100_000}
		}
		if _, err := m.BatchUpdate(keys[:k], vals[:k], nil); err != nil {
			return fmt.Errorf("fill sources at %d: %w", i, err)
		}
	}
	return nil
}
