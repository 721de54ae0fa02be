package shield

import (
	"context"
	"net/netip"
	"testing"

	"xdpshield/bpf"
	"xdpshield/internal/testutil"
)

// BenchmarkTop ranks a full table of 1,000,000 sources, next to the bare
// chunked walk (CountSources) and the key-by-key iteration a naive
// implementation would use, measured in the same run.
func BenchmarkTop(b *testing.B) {
	testutil.Root(b)
	s, err := Load(Options{TableSize: DefaultTableSize, Clock: ClockVirtual})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n, chunk = 1_000_000, 50_000
	keys := make([]bpf.ShieldSrcKey, chunk)
	vals := make([]bpf.ShieldSource, chunk)
	base := netip.MustParseAddr("2001:db8::").As16()
	for i := 0; i < n; i += chunk {
		for j := range chunk {
			v := uint32(i + j)
			a := base
			a[12], a[13], a[14], a[15] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
			keys[j] = bpf.ShieldSrcKey{Addr: a}
			vals[j] = bpf.ShieldSource{Passed: uint64(v % 1000), Dropped: uint64(v*2654435761) % 100_000}
		}
		if _, err := s.objs.Sources.BatchUpdate(keys, vals, nil); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.Run("iterate-reference", func(b *testing.B) {
		for b.Loop() {
			st, err := s.iterateSources(ctx, func(*bpf.ShieldSrcKey, *bpf.ShieldSource) {})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Scanned), "entries")
		}
	})
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			cnt, err := s.CountSources(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cnt), "entries")
		}
	})
	for _, top := range []int{10, MaxTop} {
		b.Run("top-"+map[int]string{10: "10", MaxTop: "1000"}[top], func(b *testing.B) {
			for b.Loop() {
				if _, _, err := s.Top(ctx, top, ByDropped); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
