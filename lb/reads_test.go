package lb

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestReadsDoNotWalk (issue 25, finding 3): reading the balancer's state
// (ReverseEntries, what GET /v1/lb shows, and a /metrics scrape) costs
// the same with 65,536 entries in the fallback's LRU as with none. Before,
// both walked the map entry by entry: 0.97 s at 65,536 entries.
func TestReadsDoNotWalk(t *testing.T) {
	const n = 1 << 16
	testutil.Root(t)
	l := lruLB(t, n)
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.Collector())
	read := func() time.Duration {
		var ds []time.Duration
		for range 5 {
			start := time.Now()
			_, err := l.ReverseEntries()
			require.NoError(t, err)
			_, err = reg.Gather()
			require.NoError(t, err)
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	empty := read()
	fillReverse(t, l, n)
	full := read()
	t.Logf("a read with the LRU empty: %v; with %d entries: %v", empty, n, full)
	// A walk of 65,536 entries costs thousands of times an empty read; a
	// counter read the same, give or take a busy machine.
	assert.False(t, full > 20*empty+time.Millisecond, "a read with %d entries took %v, %.0fx the %v with none: it walks the map", n, full, float64(full)/float64(empty), empty)
}
