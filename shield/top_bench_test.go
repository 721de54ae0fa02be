package shield

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/source"
)

// BenchmarkTop ranks a full table of 1,000,000 sources, next to the bare
// chunked walk (CountSources) and references measured in the same run: the
// key-by-key iteration a naive implementation would use, and the walks
// inside the kernel of bpf/walk.c, a map-element iterator that hands over
// what Top needs (iter-reference) or nothing (iter-silent-reference), and
// a bpf_for_each_map_elem that only visits each entry (visit-reference,
// the floor of any walk of the table). Each reports its CPU time and how
// long it kept its CPU from a thread beside it (pinned). Each reference
// must see the entries and the totals the chunked walk saw, or the
// benchmark fails (TestWalkReferences checks the same on a small table, on
// every kernel of the matrix).
func BenchmarkTop(b *testing.B) {
	testutil.Root(b)
	s, err := Load(Options{TableSize: DefaultTableSize, Clock: config.ClockVirtual})
	require.NoError(b, err)
	defer s.Close()
	require.NoError(b, testutil.FillSources(s.tablePut(b), ErrSetFull, 1_000_000))
	ctx := context.Background()
	var want walkSums
	_, err = s.walkSources(ctx, want.add)
	require.NoError(b, err)
	check := func(b *testing.B, name string, got walkSums) {
		b.Helper()
		require.EqualValues(b, want, got, "%s saw %+v, want %+v (the chunked walk's)", name, got, want)
		b.ReportMetric(float64(got.entries), "entries")
	}
	b.Run("batch-reference", func(b *testing.B) {
		pinned(b, func() {
			got, err := batchWalk(s)
			require.NoError(b, err)
			check(b, "BPF_MAP_LOOKUP_BATCH", got)
		})
	})
	for _, ref := range walkRefs {
		b.Run(ref.name+"-reference", func(b *testing.B) {
			walk := ref.load(b, s)
			pinned(b, func() {
				got, err := walk()
				require.NoError(b, err)
				check(b, ref.prog, got)
			})
		})
	}
	b.Run("walk", func(b *testing.B) {
		pinned(b, func() {
			cnt, err := s.CountSources(ctx)
			require.NoError(b, err)
			b.ReportMetric(float64(cnt), "entries")
		})
	})
	for _, top := range []int{10, source.MaxTop} {
		b.Run("top-"+map[int]string{10: "10", source.MaxTop: "1000"}[top], func(b *testing.B) {
			pinned(b, func() {
				_, _, err := s.Top(ctx, top, source.ByDropped)
				require.NoError(b, err)
			})
		})
	}
}

// pinned runs op in b.Loop on a thread pinned to CPU 0, beside another
// thread pinned there that sleeps 0.5 ms at a time, and reports the CPU
// time op's thread used per op (cpu-ms/op) and the longest the sleeper
// overslept (wait-ms): how long a walk keeps its CPU from the next task,
// which the data path's softirq work may be.
func pinned(b *testing.B, op func()) {
	const nap = 500 * time.Microsecond
	var cpu0 unix.CPUSet
	cpu0.Set(0)
	runtime.LockOSThread() // not unlocked: the thread ends with the sub-benchmark
	require.NoError(b, unix.SchedSetaffinity(0, &cpu0), "pin to CPU 0")
	var worst atomic.Int64
	stop, done, ready := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		defer close(done)
		runtime.LockOSThread() // not unlocked either
		ready <- unix.SchedSetaffinity(0, &cpu0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(nap)
			if late := int64(time.Since(t0) - nap); late > worst.Load() {
				worst.Store(late)
			}
		}
	}()
	require.NoError(b, <-ready, "pin the sleeper to CPU 0")
	defer func() { close(stop); <-done }()
	var r0, r1 unix.Rusage
	require.NoError(b, unix.Getrusage(unix.RUSAGE_THREAD, &r0))
	ops := 0
	for b.Loop() {
		op()
		ops++
	}
	require.NoError(b, unix.Getrusage(unix.RUSAGE_THREAD, &r1))
	cpu := r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano()
	b.ReportMetric(float64(cpu)/1e6/float64(ops), "cpu-ms/op")
	b.ReportMetric(float64(worst.Load())/1e6, "wait-ms")
}

// batchWalk reads s's table with system calls, as the service read the LRU
// table before it was an array: BPF_MAP_LOOKUP_BATCH, 1024 sets (256 KiB)
// at a time, and sums what the used ways hold.
func batchWalk(s *Shield) (walkSums, error) {
	var w walkSums
	keys := make([]uint32, 1024)
	vals := make([]bpf.ShieldSourceSet, 1024)
	var cursor ebpf.MapBatchCursor
	var scratch bpf.ShieldSource
	for {
		n, err := s.objs.Sources.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			source.VisitSet(&vals[i], &scratch, w.add)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return w, nil
		}
		if err != nil {
			return w, fmt.Errorf("batch walk: %w", err)
		}
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
		return loadWalkIter(tb, s, true)
	}},
	{"iter-silent", bpf.WalkProgWalkIter, func(tb testing.TB, s *Shield) func() (walkSums, error) {
		return loadWalkIter(tb, s, false)
	}},
	{"visit", bpf.WalkProgWalkVisit, func(tb testing.TB, s *Shield) func() (walkSums, error) {
		testutil.Feature(tb, features.ForEachMapElem)
		var objs struct {
			Prog *ebpf.Program `ebpf:"walk_visit"`
			walkSeen
		}
		loadWalk(tb, s, nil, &objs)
		tb.Cleanup(func() { objs.Prog.Close() })
		return func() (walkSums, error) {
			if _, err := objs.Prog.Run(&ebpf.RunOptions{}); err != nil {
				return walkSums{}, fmt.Errorf("run walk_visit: %w", err)
			}
			return objs.get()
		}
	}},
}

// walkSeen is what a walk of bpf/walk.c saw, as its globals hold it.
type walkSeen struct {
	Entries *ebpf.Variable `ebpf:"seen_entries"`
	Passed  *ebpf.Variable `ebpf:"seen_passed"`
	Dropped *ebpf.Variable `ebpf:"seen_dropped"`
}

func (o *walkSeen) get() (walkSums, error) {
	var w walkSums
	for _, v := range []struct {
		to   *uint64
		from *ebpf.Variable
	}{{&w.entries, o.Entries}, {&w.passed, o.Passed}, {&w.dropped, o.Dropped}} {
		if err := v.from.Get(v.to); err != nil {
			return w, fmt.Errorf("read what the walk saw: %w", err)
		}
	}
	return w, nil
}

// loadWalkIter attaches walk_iter to s's table; a walk reads the link to
// its end and sums the records (handOver) or reads what the program summed.
func loadWalkIter(tb testing.TB, s *Shield, handOver bool) func() (walkSums, error) {
	testutil.Feature(tb, features.MapIter)
	var objs struct {
		Prog *ebpf.Program `ebpf:"walk_iter"`
		walkSeen
	}
	hand := uint8(0)
	if handOver {
		hand = 1
	}
	loadWalk(tb, s, map[string]any{bpf.WalkVarHandOver: hand}, &objs)
	tb.Cleanup(func() { objs.Prog.Close() })
	it, err := link.AttachIter(link.IterOptions{Program: objs.Prog, Map: s.objs.Sources})
	require.NoError(tb, err, "attach walk_iter to the sources table")
	tb.Cleanup(func() { it.Close() })
	buf := make([]byte, 1<<20)
	return func() (walkSums, error) {
		w, err := readWalkIter(it, buf)
		if err != nil || handOver {
			return w, err
		}
		if w.entries != 0 {
			return w, fmt.Errorf("walk_iter handed over %d records, want none", w.entries)
		}
		return objs.get()
	}
}

// loadWalk loads into objs what it names of bpf/walk.c (walk_visit does not
// load before 5.14), with vars set, on s's sources table.
func loadWalk(tb testing.TB, s *Shield, vars map[string]any, objs any) {
	tb.Helper()
	spec, err := bpf.LoadWalk()
	require.NoError(tb, err)
	spec.Maps[bpf.WalkMapSources].MaxEntries = s.objs.Sources.MaxEntries()
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{bpf.WalkMapSources: s.objs.Sources}}
	require.NoError(tb, bpf.Load(spec, vars, objs, opts), "load bpf/walk.c")
}

// readWalkIter reads one walk of it: whole struct walk_rec records. A read
// that visited the kernel's bound of entries without a record to hand over
// says EAGAIN: the walk goes on.
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
			w.passed += recs[i].Src.Passed &^ source.Used
			w.dropped += recs[i].Src.Dropped
		}
		have = copy(buf, buf[whole:have])
		switch {
		case errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, io.EOF) || (n == 0 && err == nil):
			if have != 0 {
				return w, errors.New("walk_iter: a partial record at the end")
			}
			return w, nil
		case err != nil:
			return w, err
		}
	}
}

// TestWalkReferences: each walk of bpf/walk.c sees the entries and totals
// of a table the chunked walk sees, so BenchmarkTop compares like with like.
func TestWalkReferences(t *testing.T) {
	testutil.Root(t)
	s, err := Load(Options{TableSize: 1 << 14, Clock: config.ClockVirtual})
	require.NoError(t, err)
	defer s.Close()
	const n = 10_000
	require.NoError(t, testutil.FillSources(s.tablePut(t), ErrSetFull, n))
	var want walkSums
	_, err = s.walkSources(context.Background(), want.add)
	require.NoError(t, err)
	require.EqualValues(t, n, want.entries, "walkSources saw %d entries, want %d", want.entries, n)
	for _, ref := range walkRefs {
		t.Run(ref.name, func(t *testing.T) {
			got, err := ref.load(t, s)()
			require.NoError(t, err)
			assert.EqualValues(t, want, got, "%s saw %+v, want %+v (the chunked walk's)", ref.prog, got, want)
		})
	}
}

// tablePut is Table.Put on s's own table (FillSources).
func (s *Shield) tablePut(tb testing.TB) func(bpf.ShieldSrcKey, bpf.ShieldSource) error {
	tab, err := s.Table()
	require.NoError(tb, err)
	return tab.Put
}
