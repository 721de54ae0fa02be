package study

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/e2e/parts"
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
	r := &Results{Runs: 1, Limits: newResults(Options{}).Limits, StormRate: 500_000, Generator: LiveFrames}
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
			d := DropSample{SentPPS: 1e6, SeenPPS: 1e6, DropPPS: 9e5, DropsPerCPUSec: 1e6}
			if tg == "generator" {
				d = DropSample{SentPPS: 5e6}
			}
			r.addDrop(tg, src, d)
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
	r.Drop = slices.DeleteFunc(r.Drop, func(d *Drop) bool { return d.Target == "floor" && d.Sources == "few" })
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

// TestPassedFramesVerdict: the conclusion on what the passed frames cost
// follows the runs, pair by pair: the edge taking more frames with the
// shield passing almost nothing in most runs is the stack's cost; in few,
// nothing measurable.
func TestPassedFramesVerdict(t *testing.T) {
	for _, tc := range []struct {
		nopass []float64 // Mpps a run; the shield drops 3 in each
		want   string
	}{
		{[]float64{3.5, 3.6, 2.9}, "with it in 2 of 3 runs, which the runs do not carry (sign test, p = 1.000)"},
		{[]float64{3.5, 2.9, 2.9}, "with it in only 1 of 3 runs (sign test, p = 1.000): here the passed frames cost nothing measurable"},
		// The shield's drops leave out what it passed: the edge handled
		// as many frames (3.03 Mpps seen each), so "dropped more" by the
		// passed frames' count alone is no cost of the stack.
		{[]float64{3.03, 3.03, 3.03}, "only 0 of 3 runs (sign test, p = 0.250): here the passed frames cost nothing measurable"},
		// 4 of 5 is no finding (p = 0.375); 6 of 6 is (p = 0.031).
		{[]float64{3.5, 3.5, 3.5, 3.5, 2.9}, "in 4 of 5 runs, which the runs do not carry (sign test, p = 0.375)"},
		{[]float64{3.5, 3.5, 3.5, 3.5, 3.5, 3.5}, "in 6 of 6 runs (sign test, p = 0.031), so the difference is the stack's work"},
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

// TestGeneratorBound: a drop-capacity verdict needs a floor the receiver
// sets. Where the generator alone is not well above the floor, or is not
// the live-frames one, or was not measured, the target is neither met nor
// missed but generator-bound, and the report says so beside the figures.
func TestGeneratorBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gen    string
		genPPS float64 // the generator alone; the floor drops 1 Mpps
		bound  string
	}{
		{"well above", LiveFrames, 5e6, ""},
		{"at the margin", LiveFrames, 1.5e6, ""},
		{"close to the floor", LiveFrames, 1.2e6, "only 1.20x the XDP_DROP floor"},
		{"no live frames", "af_packet", 5e6, "not xdp-live-frames"},
		{"not measured", LiveFrames, 0, "was not measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := full()
			r.Generator = tc.gen
			for _, src := range DropSources {
				g, fl, sh, nf := r.drop("generator", src), r.drop("floor", src), r.drop("shield", src), r.drop("nft", src)
				g.Samples = []DropSample{{SentPPS: tc.genPPS}}
				if tc.genPPS == 0 {
					g.Samples = nil
				}
				// Five runs each, a little apart: enough for the runs to
				// separate from the thresholds (Mann-Whitney, p = 0.008).
				fl.Samples, sh.Samples, nf.Samples = nil, nil, nil
				for i := range 5 {
					j := 1 + float64(i-2)/100 // median 1
					fl.Samples = append(fl.Samples, DropSample{Run: i, SentPPS: 1e6 * j, SeenPPS: 1e6 * j, DropPPS: 1e6 * j})
					sh.Samples = append(sh.Samples, DropSample{Run: i, SentPPS: 0.9e6 * j, SeenPPS: 0.9e6 * j, DropPPS: 0.9e6 * j})
					nf.Samples = append(nf.Samples, DropSample{Run: i, SentPPS: 0.2e6 * j, SeenPPS: 0.2e6 * j, DropPPS: 0.2e6 * j})
				}
			}
			r.finish()
			var b strings.Builder
			Report(&b, r, nil)
			md := b.String()
			for _, tg := range r.Targets {
				if !strings.HasPrefix(tg.Name, "drop capacity") {
					continue
				}
				require.True(t, tg.Judged, "%s: judged", tg.Name)
				if tc.bound == "" {
					assert.Empty(t, tg.Bound, "%s", tg.Name)
					assert.True(t, tg.Met, "%s: 0.9 of the floor, 4.5x nftables: met", tg.Name)
					continue
				}
				assert.Contains(t, tg.Bound, "generator-bound: ", "%s", tg.Name)
				assert.Contains(t, tg.Bound, tc.bound, "%s", tg.Name)
				assert.False(t, tg.Met, "%s: a generator-bound target is not met", tg.Name)
			}
			if tc.bound == "" {
				assert.NotContains(t, md, "**generator-bound**", "the targets table")
				assert.NotContains(t, md, "GENERATOR-BOUND", "the conclusion")
				g := mpps(tc.genPPS)
				assert.Contains(t, md, "| the generator alone (the link refuses every frame) | few | "+g+" ("+g+"–"+g+") |", "the generator's own rate in the drop table")
				assert.Contains(t, md, "Mann-Whitney U over 5 and 5 runs, p = 0.008", "the test that carries the verdict")
				return
			}
			assert.Contains(t, md, "| **generator-bound** |", "the targets table marks it")
			assert.Contains(t, md, "GENERATOR-BOUND", "the conclusion says it")
		})
	}
}

// TestOverGenerator: the receiver's cost per frame is the pipeline's less
// the generator's own, both measured in the same run.
func TestOverGenerator(t *testing.T) {
	r := full()
	r.drop("generator", "few").Samples = []DropSample{{SentPPS: 40e6}} // 25 ns
	r.drop("shield", "few").Samples = []DropSample{{SentPPS: 10e6}}    // 100 ns
	r.finish()
	ns, ok := r.OverGenerator(r.drop("shield", "few"))
	require.True(t, ok)
	assert.InDelta(t, 75, ns, 1e-9)
}

// TestDerive: the defaults follow from the client's pace, the service's
// capacity and the budget; the study's own are derived from the published
// client pace. No per-source rate alone keeps the storm's UDP under the
// service's capacity and lets the client through: the aggregate does.
func TestDerive(t *testing.T) {
	d := Derive(348, 10_000, 25*time.Millisecond)
	assert.Equal(t, Defaults{ClientPPS: 348, Rate: 750, Burst: 1500, Capacity: 10_000, Budget: 25 * time.Millisecond, AggRate: 9000, AggBurst: 112}, d)
	assert.Greater(t, stormUDP(d.Rate), float64(d.AggRate), "the storm at the derived rate: over the aggregate, which sheds it")
	assert.Less(t, float64(d.AggRate)/32, d.ClientPPS, "no per-source rate keeps the storm under the aggregate and lets the client through")
	l := Limits()
	require.Len(t, l.Aggregates, 1)
	assert.Equal(t, uint64(9000), l.Aggregates[0].Rate)
	require.NoError(t, l.Validate(), "the study's limits")

	r := full()
	r.Defaults = StudyDefaults()
	r.finish()
	require.NotNil(t, r.Derived, "derived from the run")
	assert.Equal(t, 300.0, r.Derived.ClientPPS)
	got := strings.Join(Conclusion(r), "\n")
	assert.Contains(t, got, "the data supports: **per source 750 packets/s, burst 1500; udp/53 aggregate 9000/s, burst 112**")
}

// TestStatistics (issue 26, finding 3): the tests' p-values match their
// textbook values, a quantile needs ten samples beyond it, and a missing
// figure stays missing through results.json (null, not 0).
func TestStatistics(t *testing.T) {
	// Mann-Whitney exact two-sided p: 5 against 5 fully apart is 2/252
	// (Mann & Whitney 1947, table I: P(U<=0) = 1/252 for n=m=5); 2
	// against 2 fully apart 2/6.
	assert.InDelta(t, 2.0/252, MannWhitney([]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}), 1e-12)
	assert.InDelta(t, 1.0/3, MannWhitney([]float64{1, 2}, []float64{3, 4}), 1e-12)
	assert.InDelta(t, 1, MannWhitney([]float64{1, 2, 3}, []float64{1, 2, 3}), 1e-12)
	// Sign test: 4 of 5 is p = 12/32 two-sided (the 0.19 is one
	// side), 5 of 5 is 2/32, 9 of 10 is 22/1024.
	assert.InDelta(t, 12.0/32, SignTest(4, 5), 1e-12)
	assert.InDelta(t, 2.0/32, SignTest(5, 5), 1e-12)
	assert.InDelta(t, 22.0/1024, SignTest(9, 10), 1e-12)

	assert.Equal(t, []int{20, 1000, 10000}, []int{MinSamples(0.5), MinSamples(0.99), MinSamples(0.999)})
	d := make([]time.Duration, 800) // a paced phase's keep-alive answers
	for i := range d {
		d[i] = time.Duration(i+1) * time.Millisecond
	}
	assert.Equal(t, Q(400), quantileMs(d, 0.5))
	assert.False(t, quantileMs(d, 0.99).OK(), "p99 of 800")
	assert.False(t, quantileMs(d, 0.999).OK(), "p99.9 of 800: their maximum")
	assert.False(t, quantileMs(nil, 0.5).OK(), "no answer: missing, not 0")
	assert.Equal(t, "n/a (n=800)", fmtQ(quantileMs(d, 0.999), "%.2f", len(d)))

	b, err := json.Marshal(Sample{KAP50: 1.5, KAP99: missing})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"keep_alive_p50_ms":1.5,"keep_alive_p99_ms":null`)
	var back Sample
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, Q(1.5), back.KAP50)
	assert.False(t, back.KAP99.OK(), "null reads back as missing")
	assert.Equal(t, Stat{Median: 2, Min: 1, Max: 3, N: 2}, statOf([]float64{1, math.NaN(), 3}), "a missing run is left out")
}

// TestQuickGivesNoVerdict: two runs against two never separate, so a
// quick run's report says "runs do not separate" where a full one would
// judge, and prints no "beyond the spread".
func TestQuickGivesNoVerdict(t *testing.T) {
	r := full()
	for _, l := range r.Legit {
		s := l.Samples[0]
		l.Samples = []Sample{s, s}
	}
	r.legit("shield-dryrun", PhaseSaturation).Samples[0].RPS = 50
	r.legit("shield-dryrun", PhaseSaturation).Samples[1].RPS = 51
	r.Quick = true
	r.finish()
	var b strings.Builder
	Report(&b, r, nil)
	md := b.String()
	assert.NotContains(t, md, "beyond the spread")
	assert.Contains(t, md, "| shield-dryrun passing everything |")
	for _, tg := range r.Targets {
		if tg.Name == "shield-dryrun passing everything" {
			assert.True(t, tg.Undecided, "2 runs against 2: undecided, not missed")
			assert.Contains(t, tg.Test, "Mann-Whitney U over 2 and 2 runs, p = 0.333")
		}
	}
}

// TestRenderFromPublished (issue 26, finding 4): what WriteDocs publishes
// is enough for -render: results.json and raw.json, with every answer's
// latency, the git revision and the kernel.
func TestRenderFromPublished(t *testing.T) {
	r := full()
	r.Revision, r.Kernel = "0123abcd", "6.18.44"
	for _, l := range r.Legit {
		if l.Phase == PhaseFixed {
			l.pooledUDP = []time.Duration{time.Millisecond, 2 * time.Millisecond}
			l.pooledNew = []time.Duration{3 * time.Millisecond}
		}
	}
	out, docs := t.TempDir(), t.TempDir()
	_ = Write(out, r) // the plots may fail without gnuplot: not the point
	require.NoError(t, WriteDocs(docs, out, r))
	back, err := Load(filepath.Join(docs, "study"))
	require.NoError(t, err, "Load(docs/study): raw.json published beside results.json")
	assert.Equal(t, "0123abcd", back.Revision)
	l := back.legit("shield/storm", PhaseFixed)
	require.NotNil(t, l)
	assert.Len(t, l.pooledUDP, 2, "datagram latencies restored")
	assert.Len(t, l.pooledNew, 1, "new-connection latencies restored")
	var b strings.Builder
	Report(&b, back, nil)
	assert.Contains(t, b.String(), "xdpshield revision 0123abcd; kernel 6.18.44")
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
