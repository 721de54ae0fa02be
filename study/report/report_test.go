package report

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/study/results"
)

// full returns results in which every configuration and drop point has
// numbers.
func full() *results.Results {
	r := &results.Results{Runs: 1, Limits: results.Limits(), StormRate: 500_000, Generator: results.LiveFrames}
	for _, c := range results.Configs {
		for _, ph := range []string{results.PhaseFixed, results.PhaseSaturation} {
			s := results.Sample{RPS: 100, Requests: 100, CPUPerReqUs: 50, KAP50: 1, KAP99: 2, ClientPPS: 300, KALat: []time.Duration{time.Millisecond}}
			r.AddLegit(c, ph, s)
		}
		if c.Probe {
			l := r.LegitOf(c.Name, results.PhaseFixed)
			l.ProbeN = 1
		}
	}
	for _, src := range results.DropSources {
		for _, tg := range results.DropTargets {
			d := results.DropSample{SentPPS: 1e6, SeenPPS: 1e6, DropPPS: 9e5, DropsPerCPUSec: 1e6}
			if tg == "generator" {
				d = results.DropSample{SentPPS: 5e6}
			}
			r.AddDrop(tg, src, d)
		}
	}
	r.Finish()
	for _, c := range results.Configs {
		if c.Probe {
			r.LegitOf(c.Name, results.PhaseFixed).ProbeN = 1
		}
	}
	return r
}

func TestMissing(t *testing.T) {
	r := full()
	require.Empty(t, r.Missing(), "Missing() of complete results, want none")
	// Each gap must be reported.
	r.LegitOf("nft/storm", results.PhaseSaturation).RPS.Median = 0
	r.DropOf("shield", "many").DropPPS.Median = 0
	r.Drop = slices.DeleteFunc(r.Drop, func(d *results.Drop) bool { return d.Target == "floor" && d.Sources == "few" })
	r.LegitOf("probe", results.PhaseFixed).ProbeN = 0
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
	for _, c := range results.Configs {
		assert.True(t, strings.Contains(md, "| "+c.Name+" |"), "report lacks a row for %s", c.Name)
	}
	for _, want := range []string{"## Conclusion", "**Under a storm.**", "**Drop capacity.**", "**Which default the data supports.**", "shared"} {
		assert.True(t, strings.Contains(md, want), "report lacks %q", want)
	}
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
		sh, np := r.DropOf("shield", "few"), r.DropOf("shield-nopass", "few")
		sh.Samples, np.Samples = nil, nil
		for i, x := range tc.nopass {
			sh.Samples = append(sh.Samples, results.DropSample{Run: i, SeenPPS: 3.03e6, DropPPS: 3e6, DropsPerCPUSec: 1e6})
			np.Samples = append(np.Samples, results.DropSample{Run: i, SeenPPS: x * 1e6, DropPPS: x * 1e6, DropsPerCPUSec: 1e6})
		}
		r.Finish()
		got := strings.Join(Conclusion(r), "\n")
		assert.True(t, strings.Contains(got, tc.want), "nopass %v: Conclusion() lacks %q:\n%s", tc.nopass, tc.want, got)
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
		{"well above", results.LiveFrames, 5e6, ""},
		{"at the margin", results.LiveFrames, 1.5e6, ""},
		{"close to the floor", results.LiveFrames, 1.2e6, "only 1.20x the XDP_DROP floor"},
		{"no live frames", "af_packet", 5e6, "not xdp-live-frames"},
		{"not measured", results.LiveFrames, 0, "was not measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := full()
			r.Generator = tc.gen
			for _, src := range results.DropSources {
				g, fl, sh, nf := r.DropOf("generator", src), r.DropOf("floor", src), r.DropOf("shield", src), r.DropOf("nft", src)
				g.Samples = []results.DropSample{{SentPPS: tc.genPPS}}
				if tc.genPPS == 0 {
					g.Samples = nil
				}
				// Five runs each, a little apart: enough for the runs to
				// separate from the thresholds (Mann-Whitney, p = 0.008).
				fl.Samples, sh.Samples, nf.Samples = nil, nil, nil
				for i := range 5 {
					j := 1 + float64(i-2)/100 // median 1
					fl.Samples = append(fl.Samples, results.DropSample{Run: i, SentPPS: 1e6 * j, SeenPPS: 1e6 * j, DropPPS: 1e6 * j})
					sh.Samples = append(sh.Samples, results.DropSample{Run: i, SentPPS: 0.9e6 * j, SeenPPS: 0.9e6 * j, DropPPS: 0.9e6 * j})
					nf.Samples = append(nf.Samples, results.DropSample{Run: i, SentPPS: 0.2e6 * j, SeenPPS: 0.2e6 * j, DropPPS: 0.2e6 * j})
				}
			}
			r.Finish()
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
				g := results.Mpps(tc.genPPS)
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
	r.DropOf("generator", "few").Samples = []results.DropSample{{SentPPS: 40e6}} // 25 ns
	r.DropOf("shield", "few").Samples = []results.DropSample{{SentPPS: 10e6}}    // 100 ns
	r.Finish()
	ns, ok := r.OverGenerator(r.DropOf("shield", "few"))
	require.True(t, ok)
	assert.InDelta(t, 75, ns, 1e-9)
}

// TestDerive: the defaults follow from the client's pace, the service's
// capacity and the budget; the study's own are derived from the published
// client pace. No per-source rate alone keeps the storm's UDP under the
// service's capacity and lets the client through: the aggregate does.
func TestDerive(t *testing.T) {
	d := results.Derive(348, 10_000, 25*time.Millisecond)
	assert.Equal(t, results.Defaults{ClientPPS: 348, Rate: 750, Burst: 1500, Capacity: 10_000, Budget: 25 * time.Millisecond, AggRate: 9000, AggBurst: 112}, d)
	assert.Greater(t, results.StormUDP(d.Rate), float64(d.AggRate), "the storm at the derived rate: over the aggregate, which sheds it")
	assert.Less(t, float64(d.AggRate)/32, d.ClientPPS, "no per-source rate keeps the storm under the aggregate and lets the client through")
	l := results.Limits()
	require.Len(t, l.Aggregates, 1)
	assert.Equal(t, uint64(9000), l.Aggregates[0].Rate)
	require.NoError(t, l.Validate(), "the study's limits")

	r := full()
	r.Defaults = results.StudyDefaults()
	r.Finish()
	require.NotNil(t, r.Derived, "derived from the run")
	assert.Equal(t, 300.0, r.Derived.ClientPPS)
	got := strings.Join(Conclusion(r), "\n")
	assert.Contains(t, got, "the data supports: **per source 750 packets/s, burst 1500; udp/53 aggregate 9000/s, burst 112**")
}

// TestQuickGivesNoVerdict: two runs against two never separate, so a
// quick run's report says "runs do not separate" where a full one would
// judge, and prints no "beyond the spread".
func TestQuickGivesNoVerdict(t *testing.T) {
	r := full()
	for _, l := range r.Legit {
		s := l.Samples[0]
		l.Samples = []results.Sample{s, s}
	}
	r.LegitOf("shield-dryrun", results.PhaseSaturation).Samples[0].RPS = 50
	r.LegitOf("shield-dryrun", results.PhaseSaturation).Samples[1].RPS = 51
	r.Quick = true
	r.Finish()
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
		if l.Phase == results.PhaseFixed {
			l.PooledDatagram = []time.Duration{time.Millisecond, 2 * time.Millisecond}
			l.PooledNewConn = []time.Duration{3 * time.Millisecond}
		}
	}
	out, docs := t.TempDir(), t.TempDir()
	_ = Write(out, r) // the plots may fail without gnuplot: not the point
	require.NoError(t, WriteDocs(docs, out, r))
	back, err := results.Load(filepath.Join(docs, "study"))
	require.NoError(t, err, "Load(docs/study): raw.json published beside results.json")
	assert.Equal(t, "0123abcd", back.Revision)
	l := back.LegitOf("shield/storm", results.PhaseFixed)
	require.NotNil(t, l)
	assert.Len(t, l.PooledDatagram, 2, "datagram latencies restored")
	assert.Len(t, l.PooledNewConn, 1, "new-connection latencies restored")
	var b strings.Builder
	Report(&b, back, nil)
	assert.Contains(t, b.String(), "xdpshield revision 0123abcd; kernel 6.18.44")
}

// TestL7SectionMissingAndReport: a peers-only study is judged on its own
// cells (the main section's absence is no gap), a cell without answers is
// named, and the report has a row per target and no main section.
func TestL7SectionMissingAndReport(t *testing.T) {
	r := &results.Results{Runs: 1, Sections: []string{results.SectionPeers}, L7: &results.L7Results{Versions: map[string]string{"haproxy": "HAProxy version 2.6", "nginx": "nginx/1.22"}}}
	for _, tg := range results.L7Targets {
		r.L7.AddCell(tg, results.L7Closed, "keep-alive", 2).Samples = []results.L7Sample{{RPS: 1000, P50: 0.1, P99: 0.2, CPUPerReq: 10}}
	}
	r.Finish()
	require.Empty(t, r.Missing(), "Missing() of a complete peers-only study")
	r.L7.Cell("nginx", results.L7Closed, "keep-alive", 2).RPS.Median = 0
	assert.Equal(t, []string{"l7 nginx closed keep-alive 2B: no request answered"}, r.Missing())
	r.L7 = nil
	assert.Equal(t, []string{"l7 peers: not measured"}, r.Missing())

	r = &results.Results{Runs: 1, Sections: []string{results.SectionPeers}, L7: &results.L7Results{Versions: map[string]string{"haproxy": "HAProxy version 2.6", "nginx": "nginx/1.22"}}}
	for _, tg := range results.L7Targets {
		r.L7.AddCell(tg, results.L7Closed, "keep-alive", 2).Samples = []results.L7Sample{{RPS: 1000, P50: 0.1, P99: 0.2, CPUPerReq: 10}}
	}
	r.Finish()
	var b strings.Builder
	Report(&b, r, nil)
	md := b.String()
	for _, tg := range results.L7Targets {
		assert.Contains(t, md, "| "+tg+" |", "report lacks a row for %s", tg)
	}
	assert.Contains(t, md, "HAProxy version 2.6", "the peers' versions")
	assert.NotContains(t, md, "## Headline", "a peers-only report has no main section")
}

// TestListSectionMissing: a list a target refuses (beyond its capacity) is
// a finding, not a gap; a cell that dropped nothing is named.
func TestListSectionMissing(t *testing.T) {
	r := &results.Results{Runs: 1, Sections: []string{results.SectionLists}, Lists: &results.ListResults{Sizes: []int{1000, 1 << 20}}}
	for _, fam := range results.ListFamilies {
		r.Lists.AddCell("floor", fam, 0).Samples = []results.DropSample{{DropPPS: 1e6, SeenPPS: 1e6}}
		for _, tg := range results.ListTargets[1:] {
			r.Lists.AddCell(tg, fam, 1000).Samples = []results.DropSample{{DropPPS: 5e5, SeenPPS: 5e5}}
			r.Lists.AddCell(tg, fam, 1<<20).Refused = "too many"
		}
	}
	r.Finish()
	require.Empty(t, r.Missing(), "Missing() of a complete lists-only study")
	r.Lists.Cell("xdp-filter", "ipv6", 1000).DropPPS.Median = 0
	assert.Equal(t, []string{"lists xdp-filter ipv6 1000: nothing dropped"}, r.Missing())
	var b strings.Builder
	Report(&b, r, nil)
	assert.Contains(t, b.String(), "| ipv4 | 1048576 | xdp-filter (src list) | refused: too many |")
}
