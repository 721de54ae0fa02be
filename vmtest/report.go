package vmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xdpshield/xdpshield/vmtest/kernels"
)

// Report is a matrix run: what matrix.json holds.
type Report struct {
	Started   time.Time      `json:"started"`
	Seconds   float64        `json:"seconds"`
	Accel     string         `json:"accel"`
	ExitCode  int            `json:"exit_code"` // the matrix's: the worst of its kernels'
	Verdict   string         `json:"verdict"`
	Kernels   []KernelReport `json:"kernels"`
	Packages  []string       `json:"packages"`
	Cells     []Cell         `json:"cells"`
	SkipDiffs []SkipDiff     `json:"skipped_here_passed_there,omitempty"`
	Failures  []Failure      `json:"failures,omitempty"`
	// Runs are every binary's raw output, per kernel, in run order.
	Runs map[string][]RunResult `json:"-"`
}

// KernelReport is one kernel's boot.
type KernelReport struct {
	Name                   string  `json:"name"`
	Release                string  `json:"release"`
	Verdict                string  `json:"verdict"`
	Code                   int     `json:"exit_code"`
	Error                  string  `json:"error,omitempty"`
	BootToInitSeconds      float64 `json:"boot_to_init_seconds"`
	BootToFirstTestSeconds float64 `json:"boot_to_first_test_seconds"`
	Seconds                float64 `json:"seconds"`
	// Phases are the guest's uptime at each step of its boot (Result.Phases).
	Phases []Phase `json:"guest_phases,omitempty"`
	// EarlyPanics counts boots whose kernel died before init ran (an
	// emulator's fault: no test had run) and that were booted again.
	EarlyPanics int `json:"early_panics,omitempty"`
}

// Cell is one package on one kernel.
type Cell struct {
	Kernel  string       `json:"kernel"`
	Package string       `json:"package"`
	Status  string       `json:"status"` // pass, fail, not run, build failed
	Exit    int          `json:"exit"`
	Pass    int          `json:"pass"`
	Fail    int          `json:"fail"`
	Skip    int          `json:"skip"`
	Seconds float64      `json:"seconds"`
	Tests   []TestResult `json:"tests,omitempty"`
}

// SkipDiff is a test skipped on some kernels and passed on others.
type SkipDiff struct {
	Package   string            `json:"package"`
	Test      string            `json:"test"`
	SkippedOn map[string]string `json:"skipped_on"` // kernel -> reason
	PassedOn  []string          `json:"passed_on"`
}

// Failure is a failed test (or binary) with its output.
type Failure struct {
	Kernel  string   `json:"kernel"`
	Package string   `json:"package"`
	Test    string   `json:"test"`
	Output  []string `json:"output"`
}

func (c *Cell) fill(r RunResult) {
	c.Exit = r.Exit
	c.Seconds = r.Duration.Seconds()
	c.Tests = ParseTestOutput(r.Output)
	for _, t := range c.Tests {
		switch t.Status {
		case "pass":
			c.Pass++
		case "fail":
			c.Fail++
		case "skip":
			c.Skip++
		}
	}
	switch {
	case r.Exit == -1:
		c.Status = "not finished"
	case r.Exit != 0 || c.Fail > 0:
		c.Status = "fail"
	case c.Pass+c.Skip == 0:
		// The suite fails when zero cases ran.
		c.Status = "fail"
	default:
		c.Status = "pass"
	}
}

func failures(kernel string, c Cell, r RunResult) []Failure {
	var fs []Failure
	for _, t := range c.Tests {
		if t.Status == "fail" {
			fs = append(fs, Failure{Kernel: kernel, Package: c.Package, Test: t.Name, Output: t.Output})
		}
	}
	if c.Status != "pass" && len(fs) == 0 {
		what := "(binary)"
		if c.Pass+c.Skip == 0 && r.Exit == 0 {
			what = "(no tests ran)"
		}
		fs = append(fs, Failure{Kernel: kernel, Package: c.Package, Test: what, Output: LastLines(r.Output, 30)})
	}
	return fs
}

// LastLines is the last n lines of l (all of l when shorter).
func LastLines(l []string, n int) []string {
	if len(l) > n {
		return l[len(l)-n:]
	}
	return l
}

func skipDiffs(cells []Cell) []SkipDiff {
	type key struct{ pkg, test string }
	diffs := map[key]*SkipDiff{}
	for _, c := range cells {
		for _, t := range c.Tests {
			k := key{c.Package, t.Name}
			d := diffs[k]
			if d == nil {
				d = &SkipDiff{Package: c.Package, Test: t.Name, SkippedOn: map[string]string{}}
				diffs[k] = d
			}
			switch t.Status {
			case "skip":
				d.SkippedOn[c.Kernel] = t.Reason
			case "pass":
				d.PassedOn = append(d.PassedOn, c.Kernel)
			}
		}
	}
	var out []SkipDiff
	for _, d := range diffs {
		if len(d.SkippedOn) > 0 && len(d.PassedOn) > 0 {
			out = append(out, *d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Package != out[j].Package {
			return out[i].Package < out[j].Package
		}
		return out[i].Test < out[j].Test
	})
	return out
}

// Render writes the matrix as text: packages x kernels with
// pass/fail/skip and durations, per-kernel boot figures, the tests skipped
// on one kernel but passed on another, and the failures with their output.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "vmtest matrix: %d kernel(s) x %d package(s), accel %s, wall %s: %s\n\n",
		len(r.Kernels), len(r.Packages), r.Accel, fmtDur(r.Seconds), strings.ToUpper(r.Verdict))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	cell := map[[2]string]Cell{}
	for _, c := range r.Cells {
		cell[[2]string{c.Kernel, c.Package}] = c
	}
	fmt.Fprint(tw, "pass/fail/skip time\t")
	for _, k := range r.Kernels {
		fmt.Fprintf(tw, "%s\t", k.Name)
	}
	fmt.Fprintln(tw)
	for _, p := range r.Packages {
		fmt.Fprintf(tw, "%s\t", p)
		for _, k := range r.Kernels {
			c, ok := cell[[2]string{k.Name, p}]
			switch {
			case !ok:
				fmt.Fprint(tw, "-\t")
			case c.Status == "pass" || c.Status == "fail":
				mark := ""
				if c.Status == "fail" {
					mark = " FAIL"
				}
				fmt.Fprintf(tw, "%d/%d/%d %s%s\t", c.Pass, c.Fail, c.Skip, fmtDur(c.Seconds), mark)
			default:
				fmt.Fprintf(tw, "%s\t", strings.ToUpper(c.Status))
			}
		}
		fmt.Fprintln(tw)
	}
	row := func(name string, f func(k KernelReport) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, k := range r.Kernels {
			fmt.Fprintf(tw, "%s\t", f(k))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "\t")
	for range r.Kernels {
		fmt.Fprint(tw, "\t")
	}
	fmt.Fprintln(tw)
	row("release", func(k KernelReport) string { return k.Release })
	row("boot to init", func(k KernelReport) string { return fmtDur(k.BootToInitSeconds) })
	row("boot to first test", func(k KernelReport) string { return fmtDur(k.BootToFirstTestSeconds) })
	if slices.ContainsFunc(r.Kernels, func(k KernelReport) bool { return len(k.Phases) > 0 }) {
		for _, ph := range bootPhases {
			row(ph.row, func(k KernelReport) string {
				for _, p := range k.Phases {
					if p.Name == ph.name {
						return fmt.Sprintf("%.2fs", p.Uptime)
					}
				}
				return "-"
			})
		}
	}
	row("VM wall time", func(k KernelReport) string { return fmtDur(k.Seconds) })
	if slices.ContainsFunc(r.Kernels, func(k KernelReport) bool { return k.EarlyPanics > 0 }) {
		row("early panics, booted again", func(k KernelReport) string { return fmt.Sprint(k.EarlyPanics) })
	}
	row("verdict", func(k KernelReport) string { return strings.ToUpper(k.Verdict) })
	if err := tw.Flush(); err != nil {
		return err
	}
	trimmed := strings.Split(b.String(), "\n")
	for i, l := range trimmed {
		trimmed[i] = strings.TrimRight(l, " ")
	}
	b.Reset()
	b.WriteString(strings.Join(trimmed, "\n"))
	for _, k := range r.Kernels {
		if k.Error != "" {
			fmt.Fprintf(&b, "\nkernel %s: %s\n", k.Name, k.Error)
		}
	}
	if len(r.SkipDiffs) > 0 {
		b.WriteString("\nSkipped on some kernels, passed on others:\n")
		for _, d := range r.SkipDiffs {
			fmt.Fprintf(&b, "  %s %s: passed on %s\n", d.Package, d.Test, strings.Join(d.PassedOn, " "))
			ks := make([]string, 0, len(d.SkippedOn))
			for k := range d.SkippedOn {
				ks = append(ks, k)
			}
			sort.Slice(ks, func(i, j int) bool { return kernels.VersionLess(ks[i], ks[j]) })
			for _, k := range ks {
				fmt.Fprintf(&b, "    skipped on %s: %s\n", k, d.SkippedOn[k])
			}
		}
	}
	if len(r.Failures) > 0 {
		b.WriteString("\nFailures:\n")
		shown := map[[2]string]int{}
		for _, f := range r.Failures {
			cell := [2]string{f.Kernel, f.Package}
			if shown[cell]++; shown[cell] > maxFailuresShown {
				continue
			}
			fmt.Fprintf(&b, "  [%s] %s %s\n", f.Kernel, f.Package, f.Test)
			out := f.Output
			if len(out) > 40 {
				out = append(append([]string{}, out[:40]...), fmt.Sprintf("... %d more lines in matrix.json", len(f.Output)-40))
			}
			for _, l := range out {
				fmt.Fprintf(&b, "      %s\n", l)
			}
		}
		for _, k := range r.Kernels {
			for _, p := range r.Packages {
				if n := shown[[2]string{k.Name, p}]; n > maxFailuresShown {
					fmt.Fprintf(&b, "  [%s] %s: %d more failures, in matrix.json\n", k.Name, p, n-maxFailuresShown)
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtDur(secs float64) string {
	d := time.Duration(secs * float64(time.Second))
	switch {
	case d == 0:
		return "-"
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", secs)
	default:
		return d.Round(time.Second).String()
	}
}

// WriteReport prints txt to w and writes it as NAME.txt in dir, beside v
// as NAME.json (the matrix's report, the gate's).
func WriteReport(dir, name, txt string, v any, w io.Writer) error {
	fmt.Fprint(w, "\n"+txt)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path+".txt", []byte(txt), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".json", append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	fmt.Fprintf(w, "\nwritten: %s.txt, %s.json\n", path, path)
	return nil
}

// Write renders the report to w and writes matrix.txt and matrix.json in
// dir.
func (r *Report) Write(dir string, w io.Writer) error {
	var txt strings.Builder
	if err := r.Render(&txt); err != nil {
		return err
	}
	if err := WriteReport(dir, "matrix", txt.String(), r, w); err != nil {
		return err
	}
	// make and go run turn every failure into 2 and 1: scripts read the
	// harness's own code here.
	if err := os.WriteFile(filepath.Join(dir, "exit-code"), fmt.Appendf(nil, "%d\n", r.ExitCode), 0o644); err != nil {
		return fmt.Errorf("write matrix: %w", err)
	}
	return nil
}
