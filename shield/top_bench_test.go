package shield

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"xdpshield/bpf"
	"xdpshield/internal/testutil"
)

// BenchmarkTop ranks a full table of 1,000,000 sources, next to the bare
// chunked walk (CountSources) and three references measured in the same run:
// the key-by-key iteration a naive implementation would use, and the two
// walks inside the kernel of bpf/walk.c, a map-element iterator that hands
// over what Top needs (iter-reference) and a bpf_for_each_map_elem that
// only visits each entry (visit-reference, the floor of any walk of the
// table). Each reference must see the entries and the totals the chunked
// walk saw, or the benchmark fails (TestWalkReferences checks the same on a
// small table, on every kernel of the matrix).
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
	var want walkSums
	if _, err := s.walkSources(ctx, want.add); err != nil {
		b.Fatal(err)
	}
	check := func(b *testing.B, name string, got walkSums) {
		b.Helper()
		if got != want {
			b.Fatalf("%s saw %+v, want %+v (the chunked walk's)", name, got, want)
		}
		b.ReportMetric(float64(got.entries), "entries")
	}
	b.Run("iterate-reference", func(b *testing.B) {
		for b.Loop() {
			st, err := s.iterateSources(ctx, func(*bpf.ShieldSrcKey, *bpf.ShieldSource) {})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Scanned), "entries")
		}
	})
	for _, ref := range walkRefs {
		b.Run(ref.name+"-reference", func(b *testing.B) {
			walk := ref.load(b, s)
			for b.Loop() {
				got, err := walk()
				if err != nil {
					b.Fatal(err)
				}
				check(b, ref.prog, got)
			}
		})
	}
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

// walkSums is what a walk saw: entries and the totals of their counts.
type walkSums struct{ entries, passed, dropped uint64 }

func (w *walkSums) add(_ *bpf.ShieldSrcKey, v *bpf.ShieldSource) {
	w.entries++
	w.passed += v.Passed
	w.dropped += v.Dropped
}

// walkRefs are the walks of bpf/walk.c: each loads its program on s's
// table (skipping on a kernel too old for it) and returns one walk.
var walkRefs = []struct {
	name, prog string
	load       func(testing.TB, *Shield) func() (walkSums, error)
}{
	{"iter", bpf.WalkProgWalkIter, func(tb testing.TB, s *Shield) func() (walkSums, error) {
		testutil.Kernel(tb, 5, 9, "a map-element iterator")
		var objs struct {
			Iter *ebpf.Program `ebpf:"walk_iter"`
		}
		loadWalk(tb, s, bpf.WalkProgWalkIter, &objs)
		tb.Cleanup(func() { objs.Iter.Close() })
		it, err := link.AttachIter(link.IterOptions{Program: objs.Iter, Map: s.objs.Sources})
		if err != nil {
			tb.Fatalf("attach walk_iter to the sources table: %v", err)
		}
		tb.Cleanup(func() { it.Close() })
		buf := make([]byte, 1<<20)
		return func() (walkSums, error) { return readWalkIter(it, buf) }
	}},
	{"visit", bpf.WalkProgWalkVisit, func(tb testing.TB, s *Shield) func() (walkSums, error) {
		testutil.Kernel(tb, 5, 14, "bpf_for_each_map_elem in a syscall program")
		var objs struct {
			Visit *ebpf.Program `ebpf:"walk_visit"`
			bpf.WalkVariables
		}
		loadWalk(tb, s, bpf.WalkProgWalkVisit, &objs)
		tb.Cleanup(func() { objs.Visit.Close() })
		return func() (walkSums, error) {
			var got walkSums
			if _, err := objs.Visit.Run(&ebpf.RunOptions{}); err != nil {
				return got, fmt.Errorf("run walk_visit: %w", err)
			}
			for _, v := range []struct {
				to   *uint64
				from *ebpf.Variable
			}{{&got.entries, objs.VisitEntries}, {&got.passed, objs.VisitPassed}, {&got.dropped, objs.VisitDropped}} {
				if err := v.from.Get(v.to); err != nil {
					return got, err
				}
			}
			return got, nil
		}
	}},
}

// loadWalk loads program prog of bpf/walk.c alone (walk_visit does not
// load before 5.14) into objs, on s's sources table.
func loadWalk(tb testing.TB, s *Shield, prog string, objs any) {
	tb.Helper()
	spec, err := bpf.LoadWalk()
	if err != nil {
		tb.Fatal(err)
	}
	for name := range spec.Programs {
		if name != prog {
			delete(spec.Programs, name)
		}
	}
	spec.Maps[bpf.WalkMapSources].MaxEntries = s.TableSize()
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{bpf.WalkMapSources: s.objs.Sources}}
	if err := bpf.Load(spec, nil, objs, opts); err != nil {
		tb.Fatalf("load %s: %v", prog, err)
	}
}

// readWalkIter reads one walk of it: whole struct walk_rec records.
func readWalkIter(it *link.Iter, buf []byte) (walkSums, error) {
	var w walkSums
	rc, err := it.Open()
	if err != nil {
		return w, err
	}
	defer rc.Close()
	const size = int(unsafe.Sizeof(bpf.WalkWalkRec{}))
	have := 0
	for {
		n, err := rc.Read(buf[have:])
		have += n
		whole := have / size * size
		recs := unsafe.Slice((*bpf.WalkWalkRec)(unsafe.Pointer(unsafe.SliceData(buf))), whole/size)
		for i := range recs {
			w.entries++
			w.passed += recs[i].Val.Passed
			w.dropped += recs[i].Val.Dropped
		}
		have = copy(buf, buf[whole:have])
		if errors.Is(err, io.EOF) || (n == 0 && err == nil) {
			if have != 0 {
				return w, errors.New("walk_iter: a partial record at the end")
			}
			return w, nil
		}
		if err != nil {
			return w, err
		}
	}
}

// TestWalkReferences: each walk of bpf/walk.c sees the entries and totals
// of a table the chunked walk sees, so BenchmarkTop compares like with like.
func TestWalkReferences(t *testing.T) {
	testutil.Root(t)
	s, err := Load(Options{TableSize: 1 << 14, Clock: ClockVirtual})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 10_000
	if err := testutil.FillSources(s.objs.Sources, n); err != nil {
		t.Fatal(err)
	}
	var want walkSums
	if _, err := s.walkSources(context.Background(), want.add); err != nil {
		t.Fatal(err)
	}
	if want.entries != n {
		t.Fatalf("walkSources saw %d entries, want %d", want.entries, n)
	}
	for _, ref := range walkRefs {
		t.Run(ref.name, func(t *testing.T) {
			got, err := ref.load(t, s)()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s saw %+v, want %+v (the chunked walk's)", ref.prog, got, want)
			}
		})
	}
}
