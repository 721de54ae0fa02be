package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xdpshield/xdpshield/vmtest"
)

// Thresholds decide what fails.
type Thresholds struct {
	// Complexity is the largest accepted relative growth of instructions
	// processed or of program size (0.10: 10%).
	Complexity float64
	// SpreadFactor times the larger measured spread (old run, new run) is
	// the accepted relative growth of a speed ratio, never under MinSpeed.
	SpreadFactor float64
	MinSpeed     float64
	// VsBase is the largest accepted slow-down of a path against the base
	// revision's program timed in the same rounds (0.10: 10%).
	VsBase float64
}

// DefaultThresholds are make gate's.
var DefaultThresholds = Thresholds{Complexity: 0.10, SpreadFactor: 3, MinSpeed: 0.02, VsBase: 0.10}

// KernelID names a kernel of a run: its lock name ("host" for the host) and
// release.
type KernelID struct {
	Name    string `json:"name"`
	Release string `json:"release"`
}

// Baseline is fixtures/gate/baseline.json: the figures of a clean tree.
type Baseline struct {
	Revision string     `json:"revision"` // git HEAD it was produced from
	Dirty    bool       `json:"dirty"`    // never true in a committed baseline
	Created  time.Time  `json:"created"`
	Kernels  []KernelID `json:"kernels"`
	Figures  []Figures  `json:"figures"`
}

// ReadBaseline reads a baseline file.
func ReadBaseline(path string) (*Baseline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read baseline: %w", err)
	}
	var bl Baseline
	if err := json.Unmarshal(b, &bl); err != nil {
		return nil, fmt.Errorf("parse baseline %s: %w", path, err)
	}
	return &bl, nil
}

// Write writes the baseline, indented, with a trailing newline.
func (b *Baseline) Write(path string) error {
	js, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(js, '\n'), 0o644)
}

// ErrBaseline is a baseline the gate refuses to compare against.
var ErrBaseline = errors.New("baseline refused")

// Check refuses a baseline made from a dirty tree, or from another set of
// kernels than run: every pinned kernel must match by name and release. The
// host's release may differ (CI's host is not a developer's); the report
// says so.
func (b *Baseline) Check(run []KernelID) error {
	if b.Dirty {
		return fmt.Errorf("%w: it was produced from a dirty tree (revision %s); run make gate-update on a clean checkout", ErrBaseline, b.Revision)
	}
	names := func(ks []KernelID) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.Name)
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(names(b.Kernels), names(run)) {
		return fmt.Errorf("%w: it has kernels %v, this run %v; run make gate-update with the same KERNELS", ErrBaseline, names(b.Kernels), names(run))
	}
	for _, k := range run {
		for _, o := range b.Kernels {
			if o.Name == k.Name && o.Name != Host && o.Release != k.Release {
				return fmt.Errorf("%w: kernel %s is %s in the baseline, %s in this run (fixtures/kernels.lock changed?); run make gate-update", ErrBaseline, k.Name, o.Release, k.Release)
			}
		}
	}
	return nil
}

// Subset is the baseline restricted to the kernels of run (-subset).
func (b *Baseline) Subset(run []KernelID) *Baseline {
	s := *b
	s.Kernels, s.Figures = nil, nil
	for _, k := range b.Kernels {
		if slices.ContainsFunc(run, func(r KernelID) bool { return r.Name == k.Name }) {
			s.Kernels = append(s.Kernels, k)
		}
	}
	for _, f := range b.Figures {
		if slices.ContainsFunc(run, func(r KernelID) bool { return r.Name == f.Kernel }) {
			s.Figures = append(s.Figures, f)
		}
	}
	return &s
}

// Host is the kernel name of the figures measured natively.
const Host = "host"

// Row is one figure compared.
type Row struct {
	Kernel string `json:"kernel"`
	Kind   string `json:"kind"` // behaviour, feature, complexity, speed, collection
	Name   string `json:"name"`
	Old    string `json:"old"`
	New    string `json:"new"`
	Delta  string `json:"delta"`
	Limit  string `json:"limit"`
	Fail   bool   `json:"fail"`
	Why    string `json:"why,omitempty"`
}

// Report is the gate's verdict: out/gate/gate.json.
type Report struct {
	Started    time.Time  `json:"started"`
	Seconds    float64    `json:"seconds"`
	Revision   string     `json:"revision"`
	Baseline   string     `json:"baseline_revision"`
	Thresholds Thresholds `json:"thresholds"`
	Kernels    []KernelID `json:"kernels"`
	Rows       []Row      `json:"rows"`
	Failed     int        `json:"failed"`
	Notes      []string   `json:"notes,omitempty"`
	Figures    []Figures  `json:"figures"`
}

func pct(old, new float64) string {
	if old == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*(new-old)/old)
}

// Compare compares every figure of run with the baseline's.
func Compare(base *Baseline, run []Figures, th Thresholds) []Row {
	var rows []Row
	for _, f := range run {
		var old *Figures
		for i := range base.Figures {
			if base.Figures[i].Kernel == f.Kernel {
				old = &base.Figures[i]
			}
		}
		if old == nil {
			old = &Figures{}
		}
		kr := compareKernel(*old, f, th)
		if old.Release != "" && old.Release != f.Release {
			// Only the host may differ (Check refuses pinned kernels that
			// do): another kernel, or another machine, verifies and runs
			// the programs differently. Its behaviour, loading and speed
			// against the base still count; its other figures are shown,
			// not judged.
			for i := range kr {
				r := &kr[i]
				// A path timed against the base revision on this
				// host in the same run is judged wherever it ran.
				vsBase := strings.HasSuffix(r.Name, " vs base")
				if r.Fail && ((r.Kind == "speed" && !vsBase) || (r.Kind == "complexity" && !strings.HasSuffix(r.Name, " loads"))) {
					r.Fail, r.Why = false, ""
					r.Limit = "not judged: baseline from " + old.Release
				}
			}
		}
		rows = append(rows, kr...)
	}
	return rows
}

func keys[V any](a, b map[string]V) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func compareKernel(old, f Figures, th Thresholds) []Row {
	k := f.Kernel
	var rows []Row
	for _, e := range f.Errors {
		rows = append(rows, Row{Kernel: k, Kind: "collection", Name: "error", New: e, Fail: true, Why: e})
	}
	for _, name := range keys(old.Behaviour, f.Behaviour) {
		o, ob := old.Behaviour[name]
		n, nb := f.Behaviour[name]
		r := Row{Kernel: k, Kind: "behaviour", Name: name, Limit: "all pass, none fewer"}
		if ob {
			r.Old = fmt.Sprintf("%d pass", o.Pass)
		}
		switch {
		case !nb:
			r.New, r.Fail, r.Why = "not run", true, "the run produced no test results"
		default:
			r.New = fmt.Sprintf("%d pass %d fail %d skip", n.Pass, n.Fail, n.Skip)
			if ob {
				r.Delta = fmt.Sprintf("%+d pass", n.Pass-o.Pass)
			}
			switch {
			case n.Fail > 0:
				r.Fail, r.Why = true, strings.Join(n.Failed, "; ")
			case n.Exit != 0:
				r.Fail, r.Why = true, fmt.Sprintf("the test binary exited %d", n.Exit)
			case ob && n.Pass < o.Pass && o.Pass-n.Pass <= n.FeatureSkips-o.FeatureSkips:
				// A kernel feature the lab probes is missing here: the
				// feature rows judge that (a pinned kernel fails there).
				r.Limit = fmt.Sprintf("%d fewer pass: %d skip for kernel features missing here", o.Pass-n.Pass, n.FeatureSkips-o.FeatureSkips)
			case ob && n.Pass < o.Pass:
				r.Fail, r.Why = true, fmt.Sprintf("%d tests fewer pass than in the baseline (skipped or removed)", o.Pass-n.Pass)
			}
		}
		rows = append(rows, r)
	}
	for _, name := range keys(old.Features, f.Features) {
		o, ob := old.Features[name]
		n, nb := f.Features[name]
		r := Row{Kernel: k, Kind: "feature", Name: name, Old: presence(o, ob), New: presence(n, nb), Limit: "present where it was"}
		if ob && o == "" && (!nb || n != "") {
			if k == Host {
				r.Limit = "not judged: the host is not pinned"
			} else {
				r.Fail, r.Why = true, fmt.Sprintf("kernel feature %s was present on %s and is not now (%s): the tests needing it skip", name, k, r.New)
			}
		}
		rows = append(rows, r)
	}
	for _, name := range keys(old.Programs, f.Programs) {
		o, ob := old.Programs[name]
		n, nb := f.Programs[name]
		if !nb {
			rows = append(rows, Row{Kernel: k, Kind: "complexity", Name: name, Old: loadState(o), New: "missing", Fail: true, Why: "program not measured"})
			continue
		}
		if !n.Loaded {
			r := Row{Kernel: k, Kind: "complexity", Name: name + " loads", Old: loadState(o), New: "refused", Limit: "loads where it loaded"}
			if !ob || o.Loaded {
				r.Fail, r.Why = true, "the verifier refuses it: "+n.Error
			}
			rows = append(rows, r)
			continue
		}
		for _, m := range []struct {
			what     string
			old, new float64
		}{
			{"insns processed", float64(o.InsnsProcessed), float64(n.InsnsProcessed)},
			{"xlated insns", float64(o.XlatedInsns), float64(n.XlatedInsns)},
		} {
			r := Row{Kernel: k, Kind: "complexity", Name: name + " " + m.what, New: fmt.Sprint(m.new),
				Limit: fmt.Sprintf("+%.0f%%", 100*th.Complexity)}
			if ob && o.Loaded {
				r.Old, r.Delta = fmt.Sprint(m.old), pct(m.old, m.new)
				if m.new > m.old*(1+th.Complexity) {
					r.Fail, r.Why = true, fmt.Sprintf("%s grew %s, over %.0f%%", m.what, pct(m.old, m.new), 100*th.Complexity)
				}
			} else {
				r.Old = loadState(o)
			}
			rows = append(rows, r)
		}
	}
	// Speed is measured on the host alone: under TCG a path's cost moved
	// by up to 58% between two boots of the same program.
	for _, name := range keys(old.Speed, f.Speed) {
		if k != Host {
			break
		}
		o, ob := old.Speed[name]
		n, nb := f.Speed[name]
		r := Row{Kernel: k, Kind: "speed", Name: name + " x-ref"}
		switch {
		case !nb:
			r.New, r.Fail, r.Why = "missing", true, "path not measured"
		case n.Error != "":
			r.New, r.Fail, r.Why = "error", true, n.Error
		case n.VsBase > 0:
			r.Name = name + " vs base"
			r.Old, r.New = fmt.Sprintf("%.2f ns", n.BaseNsPerPkt), fmt.Sprintf("%.2f ns ±%.1f%%", n.NsPerPkt, 100*n.VsBaseSpread)
			r.Delta, r.Limit = pct(1, n.VsBase), fmt.Sprintf("+%.0f%%", 100*th.VsBase)
			if n.VsBase > 1+th.VsBase {
				r.Fail, r.Why = true, fmt.Sprintf("%s is %s slower than the base revision's %s program timed in the same rounds (%.2f ns/pkt, base %.2f), over %.0f%%", name, pct(1, n.VsBase), objectOf(name), n.NsPerPkt, n.BaseNsPerPkt, 100*th.VsBase)
			}
		case !ob:
			r.New = fmt.Sprintf("%.3f", n.Ratio)
			if n.NoBase != "" {
				r.Old, r.Limit = "-", n.NoBase
			}
		default:
			// No base timed beside it (its layout differs): the
			// baseline's recorded ratio to XDP_DROP.
			tol := max(th.SpreadFactor*max(o.Spread, n.Spread), th.MinSpeed)
			r.Old, r.New = fmt.Sprintf("%.3f ±%.1f%%", o.Ratio, 100*o.Spread), fmt.Sprintf("%.3f ±%.1f%%", n.Ratio, 100*n.Spread)
			r.Delta, r.Limit = pct(o.Ratio, n.Ratio), fmt.Sprintf("+%.1f%%", 100*tol)
			if n.Ratio > o.Ratio*(1+tol) {
				r.Fail, r.Why = true, fmt.Sprintf("%s is %s slower relative to XDP_DROP (%.2f ns/pkt, was %.2f), over the tolerance %.1f%%", name, pct(o.Ratio, n.Ratio), n.NsPerPkt, o.NsPerPkt, 100*tol)
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// objectOf names the object of a speed path: the balancer's are
// xdplb/..., the shield's have no prefix.
func objectOf(path string) string {
	if obj, _, ok := strings.Cut(path, "/"); ok {
		return obj
	}
	return "shield"
}

func presence(errno string, probed bool) string {
	switch {
	case !probed:
		return "-"
	case errno == "":
		return "present"
	}
	return "missing: " + errno
}

func loadState(p Program) string {
	switch {
	case p.Loaded:
		return "loaded"
	case p.Error != "":
		return "refused"
	}
	return "-"
}

// Render prints the report: per kernel, every row with old, new and delta,
// failing rows marked, then the failures with their causes.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	verdict := "PASS"
	if r.Failed > 0 {
		verdict = fmt.Sprintf("FAIL (%d)", r.Failed)
	}
	fmt.Fprintf(&b, "regression gate: %d kernel(s), revision %s against baseline %s: %s\n", len(r.Kernels), r.Revision, r.Baseline, verdict)
	for _, k := range r.Kernels {
		fmt.Fprintf(&b, "\n== %s (%s)\n", k.Name, k.Release)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\tkind\tfigure\told\tnew\tdelta\tlimit")
		for _, row := range r.Rows {
			if row.Kernel != k.Name {
				continue
			}
			mark := ""
			if row.Fail {
				mark = "FAIL"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, row.Kind, row.Name, row.Old, row.New, row.Delta, row.Limit)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	if r.Failed > 0 {
		b.WriteString("\nFailures:\n")
		for _, row := range r.Rows {
			if row.Fail {
				fmt.Fprintf(&b, "  [%s] %s %s: %s\n", row.Kernel, row.Kind, row.Name, row.Why)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Write renders the report to w and writes gate.txt and gate.json in dir.
func (r *Report) Write(dir string, w io.Writer) error {
	var txt strings.Builder
	if err := r.Render(&txt); err != nil {
		return err
	}
	return vmtest.WriteReport(dir, "gate", txt.String(), r, w)
}

// ReportFigures reads the figures of a gate report (out/gate/gate.json)
// that measured revision rev with a clean tree: a baseline can then be
// written from a run already made (CI's, of the same commit) instead of
// booting every kernel again. The speed figures timed against a base
// program are dropped: they compare with another revision's program and
// mean nothing in a baseline.
func ReportFigures(path, rev string) ([]Figures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("parse report %s: %w", path, err)
	}
	if rep.Revision != rev {
		return nil, fmt.Errorf("%w: report %s measured %q, the tree is at %s", ErrBaseline, path, rep.Revision, rev)
	}
	if len(rep.Figures) == 0 {
		return nil, fmt.Errorf("%w: report %s has no figures", ErrBaseline, path)
	}
	for i := range rep.Figures {
		for name, p := range rep.Figures[i].Speed {
			p.VsBase, p.BaseNsPerPkt, p.VsBaseSpread, p.NoBase = 0, 0, 0, ""
			rep.Figures[i].Speed[name] = p
		}
	}
	return rep.Figures, nil
}
