package study

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/study/results"
)

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkShield/reference-2         	    1000	     13393 ns/op	        38.00 ns/pkt	         1.000 x-ref
BenchmarkShield/allow-2             	    1000	     63777 ns/op	        50.00 ns/pkt	       100.0 on-path-%	         1.786 x-ref
BenchmarkOther-2	100	5 ns/op
PASS`
	got := parseBench(out)
	want := []results.BenchRow{{Name: "BenchmarkShield/reference", NsPkt: 38, XRef: 1}, {Name: "BenchmarkShield/allow", NsPkt: 50, XRef: 1.786}}
	require.Len(t, got, len(want), "parseBench = %+v, want %+v", got, want)
	for i := range want {
		assert.Equal(t, want[i], got[i], "parseBench row %d", i)
	}
}

// TestWaitsForStorm: the study measures nothing while a storm (or another
// study) holds the machine: Run waits for the storm lock, here until its
// context ends, and has set nothing up meanwhile.
func TestWaitsForStorm(t *testing.T) {
	testutil.Root(t)
	unlock, err := parts.LockStorms(context.Background(), slog.Default())
	require.NoError(t, err)
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	opt := QuickOptions()
	opt.Out = t.TempDir()
	res, err := Run(ctx, opt)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Run beside a storm: want the context's deadline (it waited)")
	assert.Nil(t, res, "Run beside a storm: want no results (it waited)")
}

// TestDropOrderAlternates: the conclusion compares the shield and the
// shield passing almost nothing run by run; measured always in the same
// order, a drift of the shared machine within a run (the generator
// speeding up or slowing down) would favour the later one in every run
// and read as the passed frames' cost. Every target is measured once a
// run, and the pair's order alternates from run to run.
func TestDropOrderAlternates(t *testing.T) {
	before := func(order []string) bool {
		return slices.Index(order, "shield") < slices.Index(order, "shield-nopass")
	}
	for run := range 4 {
		order := dropOrder(run)
		assert.Equal(t, slices.Sorted(slices.Values(results.DropTargets)), slices.Sorted(slices.Values(order)), "dropOrder(%d) = %v, want each of %v once", run, order, results.DropTargets)
		if run > 0 {
			assert.NotEqual(t, before(dropOrder(run-1)), before(order), "dropOrder(%d) = %v, dropOrder(%d) = %v: want shield and shield-nopass in turns", run, order, run-1, dropOrder(run-1))
		}

	}
}
