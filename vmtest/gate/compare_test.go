package gate

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/vmtest"
)

func figures(kernel, release string, insns uint32, ratio, spread float64, pass int) Figures {
	return Figures{
		Kernel: kernel, Release: release,
		Programs: map[string]Program{
			"shield":        {Loaded: true, InsnsProcessed: insns, XlatedInsns: 500},
			"shield_compat": {Loaded: true, InsnsProcessed: insns, XlatedInsns: 480},
		},
		Speed:     map[string]Path{"ok": {Ratio: ratio, Spread: spread, NsPerPkt: 10 * ratio}},
		Behaviour: map[string]Behaviour{"github.com/xdpshield/xdpshield/sim": {Pass: pass}, CompatRun: {Pass: pass}},
		Features:  map[string]string{"map_elem_iter": "", "xdp_live_frames": "EINVAL"},
	}
}

// failing returns the failing rows' "kernel kind name" for comparison.
func failing(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if r.Fail {
			out = append(out, r.Kernel+" "+r.Kind+" "+r.Name)
		}
	}
	return out
}

func TestCompare(t *testing.T) {
	base := &Baseline{Figures: []Figures{figures("6.1", "6.1.0-1", 1000, 2.0, 0.02, 100)}}
	for _, tc := range []struct {
		name   string
		mutate func(f *Figures)
		want   []string
	}{
		{"unchanged", func(f *Figures) {}, nil},
		{"complexity +10% is the limit", func(f *Figures) { f.Programs["shield"] = Program{Loaded: true, InsnsProcessed: 1100, XlatedInsns: 500} }, nil},
		{"complexity +10.1%", func(f *Figures) { f.Programs["shield"] = Program{Loaded: true, InsnsProcessed: 1101, XlatedInsns: 500} },
			[]string{"6.1 complexity shield insns processed"}},
		{"program size +20%", func(f *Figures) {
			f.Programs["shield_compat"] = Program{Loaded: true, InsnsProcessed: 1000, XlatedInsns: 576}
		},
			[]string{"6.1 complexity shield_compat xlated insns"}},
		{"stops loading", func(f *Figures) { f.Programs["shield"] = Program{Error: "R1 invalid mem access"} },
			[]string{"6.1 complexity shield loads"}},
		{"program gone", func(f *Figures) { delete(f.Programs, "shield") }, []string{"6.1 complexity shield"}},
		// Speed is not judged under TCG, however far it moved.
		{"speed in a VM", func(f *Figures) { f.Speed["ok"] = Path{Ratio: 4.02, Spread: 0.02} }, nil},
		{"a test fails", func(f *Figures) {
			f.Behaviour[CompatRun] = Behaviour{Pass: 99, Fail: 1, Failed: []string{"TestDryRun: boom"}}
		},
			[]string{"6.1 behaviour " + CompatRun}},
		{"fewer pass", func(f *Figures) { f.Behaviour["github.com/xdpshield/xdpshield/sim"] = Behaviour{Pass: 98, Skip: 2} }, []string{"6.1 behaviour github.com/xdpshield/xdpshield/sim"}},
		{"binary exits non-zero", func(f *Figures) { f.Behaviour["github.com/xdpshield/xdpshield/sim"] = Behaviour{Pass: 100, Exit: 2} }, []string{"6.1 behaviour github.com/xdpshield/xdpshield/sim"}},
		{"run missing", func(f *Figures) { delete(f.Behaviour, CompatRun) }, []string{"6.1 behaviour " + CompatRun}},
		// A feature only the lab needs: its loss fails a pinned kernel;
		// the tests that skip for it do not fail on their own.
		{"feature lost", func(f *Figures) {
			f.Features["map_elem_iter"] = "EPERM"
			f.Behaviour["github.com/xdpshield/xdpshield/sim"] = Behaviour{Pass: 98, Skip: 2, FeatureSkips: 2}
		}, []string{"6.1 feature map_elem_iter"}},
		{"feature gained", func(f *Figures) { f.Features["xdp_live_frames"] = "" }, nil},
		{"feature no longer probed", func(f *Figures) { delete(f.Features, "map_elem_iter") }, []string{"6.1 feature map_elem_iter"}},
		{"fewer pass than feature skips explain", func(f *Figures) {
			f.Behaviour["github.com/xdpshield/xdpshield/sim"] = Behaviour{Pass: 97, Skip: 3, FeatureSkips: 2}
		}, []string{"6.1 behaviour github.com/xdpshield/xdpshield/sim"}},
		{"collection error", func(f *Figures) { f.Errors = []string{"measurement run did not run"} }, []string{"6.1 collection error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := figures("6.1", "6.1.0-1", 1000, 2.0, 0.02, 100)
			tc.mutate(&f)
			rows := Compare(base, []Figures{f}, DefaultThresholds)
			assert.Equal(t, tc.want, failing(rows), "failing rows")
		})
	}
}

// TestCompareSpeed: the host's paths against the base revision's program
// timed in the same rounds, or, without one (the layout changed), against
// the baseline's ratio to XDP_DROP.
func TestCompareSpeed(t *testing.T) {
	base := &Baseline{Figures: []Figures{figures(Host, "6.18.1", 1000, 2.0, 0.02, 100)}}
	for _, tc := range []struct {
		name string
		path Path
		fail bool
	}{
		// Tolerance: 3 x max(2%, 2%) = 6%.
		{"x-ref within tolerance", Path{Ratio: 2.11, Spread: 0.02}, false},
		{"x-ref past tolerance", Path{Ratio: 2.13, Spread: 0.02}, true},
		{"a noisy run widens it", Path{Ratio: 2.13, Spread: 0.05}, false},
		{"error", Path{Error: "only 3% on path"}, true},
		// Against the base, the ratio to the reference is not read.
		{"vs base +9.9%", Path{Ratio: 3.0, VsBase: 1.099, NsPerPkt: 11, BaseNsPerPkt: 10}, false},
		{"vs base +10.1%", Path{Ratio: 2.0, VsBase: 1.101, NsPerPkt: 11, BaseNsPerPkt: 10}, true},
		{"vs base faster", Path{Ratio: 2.0, VsBase: 0.8}, false},
	} {
		f := figures(Host, "6.18.1", 1000, 2.0, 0.02, 100)
		f.Speed["ok"] = tc.path
		var want []string
		if tc.fail {
			want = []string{"host speed ok"}
		}
		var got []string
		for _, r := range failing(Compare(base, []Figures{f}, DefaultThresholds)) {
			got = append(got, strings.TrimSuffix(strings.TrimSuffix(r, " x-ref"), " vs base"))
		}
		assert.Equal(t, want, got, tc.name)
	}
}

// TestCompareSpeedObjects: the balancer's paths are judged as the
// shield's, against its own base; a path whose object the base revision
// did not have is shown as "no base", not failed, and its failure names
// the program it was timed against.
func TestCompareSpeedObjects(t *testing.T) {
	base := &Baseline{Figures: []Figures{figures(Host, "6.18.1", 1000, 2.0, 0.02, 100)}}
	f := figures(Host, "6.18.1", 1000, 2.0, 0.02, 100)
	f.Speed["xdplb/not-vip"] = Path{Ratio: 1.9, Spread: 0.05, NoBase: "no base: the base revision has no bpf/xdplb_bpfel.o"}
	rows := Compare(base, []Figures{f}, DefaultThresholds)
	assert.Empty(t, failing(rows))
	var row Row
	for _, r := range rows {
		if r.Name == "xdplb/not-vip x-ref" {
			row = r
		}
	}
	assert.Equal(t, "no base: the base revision has no bpf/xdplb_bpfel.o", row.Limit, "row %+v", row)
	assert.Equal(t, "1.900", row.New)

	f.Speed["xdplb/not-vip"] = Path{Ratio: 1.9, VsBase: 1.2, NsPerPkt: 60, BaseNsPerPkt: 50}
	rows = Compare(base, []Figures{f}, DefaultThresholds)
	require.Equal(t, []string{"host speed xdplb/not-vip vs base"}, failing(rows))
	for _, r := range rows {
		if r.Fail {
			assert.Contains(t, r.Why, "slower than the base revision's xdplb program")
		}
	}
	f.Speed["xdplb/not-vip"] = Path{Ratio: 1.9, VsBase: 1.0}
	f.Speed["ok"] = Path{Ratio: 2.0, VsBase: 1.2, NsPerPkt: 12, BaseNsPerPkt: 10}
	rows = Compare(base, []Figures{f}, DefaultThresholds)
	require.Equal(t, []string{"host speed ok vs base"}, failing(rows))
	for _, r := range rows {
		if r.Fail {
			assert.Contains(t, r.Why, "slower than the base revision's shield program")
		}
	}
}

// TestCompareOtherHost: a host on another kernel is not judged on
// complexity and speed, but still on behaviour and on loading.
func TestCompareOtherHost(t *testing.T) {
	base := &Baseline{Figures: []Figures{figures(Host, "6.18.1", 1000, 2.0, 0.02, 100)}}
	f := figures(Host, "6.12.9", 2000, 4.0, 0.02, 100)
	assert.Empty(t, failing(Compare(base, []Figures{f}, DefaultThresholds)))
	f.Programs["shield"] = Program{Error: "refused"}
	f.Behaviour["github.com/xdpshield/xdpshield/sim"] = Behaviour{Pass: 99, Fail: 1}
	assert.Equal(t, []string{"host behaviour github.com/xdpshield/xdpshield/sim", "host complexity shield loads"}, failing(Compare(base, []Figures{f}, DefaultThresholds)))
	// Timed against the base on this host, in this run: judged.
	f = figures(Host, "6.12.9", 1000, 2.0, 0.02, 100)
	f.Speed["ok"] = Path{Ratio: 2.0, VsBase: 1.2, NsPerPkt: 12, BaseNsPerPkt: 10}
	assert.Equal(t, []string{"host speed ok vs base"}, failing(Compare(base, []Figures{f}, DefaultThresholds)))
}

// TestCompareHostFeature: the host may lack a feature the baseline's host
// had (another build of the kernel, as one 6.18 build refuses iterators):
// the report says so, and the tests that skip for it do not fail.
func TestCompareHostFeature(t *testing.T) {
	base := &Baseline{Figures: []Figures{figures(Host, "6.18.44-fc-v595", 1000, 2.0, 0.02, 100)}}
	f := figures(Host, "6.18.44-fc-v1045", 1000, 2.0, 0.02, 98)
	f.Features["map_elem_iter"] = "EPERM"
	f.Behaviour["github.com/xdpshield/xdpshield/sim"] = Behaviour{Pass: 98, Skip: 2, FeatureSkips: 2}
	f.Behaviour[CompatRun] = Behaviour{Pass: 100}
	rows := Compare(base, []Figures{f}, DefaultThresholds)
	assert.Empty(t, failing(rows))
	var limits []string
	for _, r := range rows {
		if r.Kind == "feature" && r.Name == "map_elem_iter" || r.Kind == "behaviour" && r.Name == "github.com/xdpshield/xdpshield/sim" {
			limits = append(limits, r.Limit)
		}
	}
	assert.Equal(t, []string{"2 fewer pass: 2 skip for kernel features missing here", "not judged: the host is not pinned"}, limits)
}

func TestBaselineCheck(t *testing.T) {
	ids := []KernelID{{Host, "6.18.1"}, {"5.10", "5.10.0-32-cloud-amd64"}, {"6.1", "6.1.0-40-cloud-amd64"}}
	for _, tc := range []struct {
		name string
		b    Baseline
		want string // "" accepted
	}{
		{"same", Baseline{Kernels: ids}, ""},
		{"host elsewhere", Baseline{Kernels: []KernelID{{Host, "6.1.0"}, ids[1], ids[2]}}, ""},
		{"dirty", Baseline{Dirty: true, Revision: "abc", Kernels: ids}, "dirty tree"},
		{"a kernel fewer", Baseline{Kernels: ids[:2]}, "kernels [5.10 host], this run [5.10 6.1 host]"},
		{"another release", Baseline{Kernels: []KernelID{ids[0], ids[1], {"6.1", "6.1.0-41-cloud-amd64"}}}, "kernel 6.1 is 6.1.0-41-cloud-amd64 in the baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.Check(ids)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrBaseline), "errors.Is(%v, ErrBaseline)", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	sub := (&Baseline{Kernels: ids}).Subset(ids[:1])
	assert.NoError(t, sub.Check(ids[:1]), "Subset(host).Check(host)")
}

// TestReport: failing rows are marked, and the failures name their cause.
func TestReport(t *testing.T) {
	base := &Baseline{Revision: "old", Figures: []Figures{figures("6.1", "r", 1000, 2.0, 0.02, 100)}}
	f := figures("6.1", "r", 1200, 2.0, 0.02, 100)
	rep := &Report{Revision: "new", Baseline: "old", Kernels: []KernelID{{"6.1", "r"}}, Rows: Compare(base, []Figures{f}, DefaultThresholds)}
	for _, r := range rep.Rows {
		if r.Fail {
			rep.Failed++
		}
	}
	var b strings.Builder
	require.NoError(t, rep.Render(&b))
	out := b.String()
	assert.Contains(t, out, "FAIL (2)")
	assert.Contains(t, out, "FAIL  complexity  shield insns processed")
	assert.Contains(t, out, "[6.1] complexity shield insns processed: insns processed grew +20.0%, over 10%")
}

// TestFailed reads the cause out of testify's block.
func TestFailed(t *testing.T) {
	got := failed([]vmtest.TestResult{{Name: "TestX/a", Status: "fail", Output: []string{
		"x_test.go:12:", "Error Trace:\tx_test.go:12", "Error:      \tNot equal:", "expected: 4", "actual  : 5", "Test:       \tTestX/a", "Messages:   \tSource().Dropped",
	}}})
	assert.Equal(t, []string{"TestX/a: Source().Dropped: Not equal: expected: 4 actual  : 5"}, got)
}
