package shield

import (
	"context"
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
	if err := testutil.FillSources(s.objs.Sources, 1_000_000); err != nil {
		b.Fatal(err)
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
