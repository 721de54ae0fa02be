package study

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/e2e"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

func TestStatOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Stat
	}{
		{nil, Stat{}},
		{[]float64{3}, Stat{3, 3, 3, 1}},
		{[]float64{5, 1, 3}, Stat{3, 1, 5, 3}},
		{[]float64{4, 1, 3, 2}, Stat{2.5, 1, 4, 4}},
	} {
		assert.Equal(t, tc.want, statOf(tc.in), "statOf(%v)", tc.in)
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkShield/reference-2         	    1000	     13393 ns/op	        38.00 ns/pkt	         1.000 x-ref
BenchmarkShield/allow-2             	    1000	     63777 ns/op	        50.00 ns/pkt	       100.0 on-path-%	         1.786 x-ref
BenchmarkOther-2	100	5 ns/op
PASS`
	got := parseBench(out)
	want := []BenchRow{{"BenchmarkShield/reference", 38, 1}, {"BenchmarkShield/allow", 50, 1.786}}
	require.Len(t, got, len(want), "parseBench = %+v, want %+v", got, want)
	for i := range want {
		assert.Equal(t, want[i], got[i], "parseBench row %d", i)
	}
}

// full returns results in which every configuration and drop point has
// numbers.
func full() *Results {
	r := &Results{Runs: 1, Limits: newResults(Options{}).Limits, StormRate: 500_000}
	for _, c := range Configs {
		for _, ph := range []string{PhaseFixed, PhaseSaturation} {
			s := Sample{RPS: 100, Requests: 100, CPUPerReqUs: 50, KAP50: 1, KAP99: 2, ClientPPS: 300, ka: []time.Duration{time.Millisecond}}
			r.addLegit(c, ph, s)
		}
		if c.Probe {
			l := r.legit(c.Name, PhaseFixed)
			l.ProbeN = 1
		}
	}
	for _, src := range DropSources {
		for _, tg := range DropTargets {
			r.addDrop(tg, src, DropSample{SeenPPS: 1e6, DropPPS: 9e5, DropsPerCPUSec: 1e6})
		}
	}
	r.finish()
	for _, c := range Configs {
		if c.Probe {
			r.legit(c.Name, PhaseFixed).ProbeN = 1
		}
	}
	return r
}

func TestMissing(t *testing.T) {
	r := full()
	require.Empty(t, r.Missing(), "Missing() of complete results, want none")
	// Each gap must be reported.
	r.legit("nft/storm", PhaseSaturation).RPS.Median = 0
	r.drop("shield", "many").DropPPS.Median = 0
	r.Drop = r.Drop[1:] // floor/few gone
	r.legit("probe", PhaseFixed).ProbeN = 0
	m := strings.Join(r.Missing(), "\n")
	for _, want := range []string{"nft/storm saturation: no successful request", "drop capacity shield/many: nothing dropped", "drop capacity floor/few: not measured", "probe fixed: the probe timed nothing"} {
		assert.Contains(t, m, want, "Missing() must name %q", want)
	}
}

func TestReportNamesEveryConfiguration(t *testing.T) {
	r := full()
	var b strings.Builder
	Report(&b, r, nil)
	md := b.String()
	for _, c := range Configs {
		assert.True(t, strings.Contains(md, "| "+c.Name+" |"), "report lacks a row for %s", c.Name)
	}
	for _, want := range []string{"## Conclusion", "**Under a storm.**", "**Drop capacity.**", "**Which default the data supports.**", "shared"} {
		assert.True(t, strings.Contains(md, want), "report lacks %q", want)
	}
}

// TestWaitsForStorm: the study measures nothing while a storm (or another
// study) holds the machine: Run waits for the storm lock, here until its
// context ends, and has set nothing up meanwhile.
func TestWaitsForStorm(t *testing.T) {
	testutil.Root(t)
	unlock, err := e2e.LockStorms(context.Background(), slog.Default())
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

// TestPassedFramesVerdict: the conclusion on what the passed frames cost
// follows the runs, pair by pair: the edge taking more frames with the
// shield passing almost nothing in most runs is the stack's cost; in few,
// nothing measurable.
func TestPassedFramesVerdict(t *testing.T) {
	for _, tc := range []struct {
		nopass []float64 // Mpps a run; the shield drops 3 in each
		want   string
	}{
		{[]float64{3.5, 3.6, 2.9}, "with it in 2 of 3 runs, so the difference is the stack's work"},
		{[]float64{3.5, 2.9, 2.9}, "with it in only 1 of 3 runs: here the passed frames cost nothing measurable"},
		// The shield's drops leave out what it passed: the edge handled
		// as many frames (3.03 Mpps seen each), so "dropped more" by the
		// passed frames' count alone is no cost of the stack.
		{[]float64{3.03, 3.03, 3.03}, "only 0 of 3 runs: here the passed frames cost nothing measurable"},
	} {
		r := full()
		sh, np := r.drop("shield", "few"), r.drop("shield-nopass", "few")
		sh.Samples, np.Samples = nil, nil
		for i, x := range tc.nopass {
			sh.Samples = append(sh.Samples, DropSample{Run: i, SeenPPS: 3.03e6, DropPPS: 3e6, DropsPerCPUSec: 1e6})
			np.Samples = append(np.Samples, DropSample{Run: i, SeenPPS: x * 1e6, DropPPS: x * 1e6, DropsPerCPUSec: 1e6})
		}
		r.finish()
		got := strings.Join(Conclusion(r), "\n")
		assert.True(t, strings.Contains(got, tc.want), "nopass %v: Conclusion() lacks %q:\n%s", tc.nopass, tc.want, got)
	}
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
		assert.Equal(t, slices.Sorted(slices.Values(DropTargets)), slices.Sorted(slices.Values(order)), "dropOrder(%d) = %v, want each of %v once", run, order, DropTargets)
		if run > 0 {
			assert.NotEqual(t, before(dropOrder(run-1)), before(order), "dropOrder(%d) = %v, dropOrder(%d) = %v: want shield and shield-nopass in turns", run, order, run-1, dropOrder(run-1))
		}

	}
}

// TestL7SectionMissingAndReport: a peers-only study is judged on its own
// cells (the main section's absence is no gap), a cell without answers is
// named, and the report has a row per target and no main section.
func TestL7SectionMissingAndReport(t *testing.T) {
	r := &Results{Runs: 1, Sections: []string{SectionPeers}, L7: &L7Results{Versions: map[string]string{"haproxy": "HAProxy version 2.6", "nginx": "nginx/1.22"}}}
	for _, tg := range L7Targets {
		r.L7.cell(tg, L7Closed, "keep-alive", 2).Samples = []L7Sample{{RPS: 1000, P50: 0.1, P99: 0.2, CPUPerReq: 10}}
	}
	r.finish()
	require.Empty(t, r.Missing(), "Missing() of a complete peers-only study")
	r.L7.Cell("nginx", L7Closed, "keep-alive", 2).RPS.Median = 0
	assert.Equal(t, []string{"l7 nginx closed keep-alive 2B: no request answered"}, r.Missing())
	r.L7 = nil
	assert.Equal(t, []string{"l7 peers: not measured"}, r.Missing())

	r = &Results{Runs: 1, Sections: []string{SectionPeers}, L7: &L7Results{Versions: map[string]string{"haproxy": "HAProxy version 2.6", "nginx": "nginx/1.22"}}}
	for _, tg := range L7Targets {
		r.L7.cell(tg, L7Closed, "keep-alive", 2).Samples = []L7Sample{{RPS: 1000, P50: 0.1, P99: 0.2, CPUPerReq: 10}}
	}
	r.finish()
	var b strings.Builder
	Report(&b, r, nil)
	md := b.String()
	for _, tg := range L7Targets {
		assert.Contains(t, md, "| "+tg+" |", "report lacks a row for %s", tg)
	}
	assert.Contains(t, md, "HAProxy version 2.6", "the peers' versions")
	assert.NotContains(t, md, "## Headline", "a peers-only report has no main section")
}

// TestListSectionMissing: a list a target refuses (beyond its capacity) is
// a finding, not a gap; a cell that dropped nothing is named.
func TestListSectionMissing(t *testing.T) {
	r := &Results{Runs: 1, Sections: []string{SectionLists}, Lists: &ListResults{Sizes: []int{1000, 1 << 20}}}
	for _, fam := range ListFamilies {
		r.Lists.cell("floor", fam, 0).Samples = []DropSample{{DropPPS: 1e6, SeenPPS: 1e6}}
		for _, tg := range ListTargets[1:] {
			r.Lists.cell(tg, fam, 1000).Samples = []DropSample{{DropPPS: 5e5, SeenPPS: 5e5}}
			r.Lists.cell(tg, fam, 1<<20).Refused = "too many"
		}
	}
	r.finish()
	require.Empty(t, r.Missing(), "Missing() of a complete lists-only study")
	r.Lists.Cell("xdp-filter", "ipv6", 1000).DropPPS.Median = 0
	assert.Equal(t, []string{"lists xdp-filter ipv6 1000: nothing dropped"}, r.Missing())
	var b strings.Builder
	Report(&b, r, nil)
	assert.Contains(t, b.String(), "| ipv4 | 1048576 | xdp-filter (src list) | refused: too many |")
}
