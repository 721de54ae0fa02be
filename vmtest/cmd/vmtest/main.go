// Command vmtest runs the VM matrix and maintains the kernel lock:
//
//	vmtest matrix [-kernels "5.10 6.1"] [-out out/vmtest] [-cpus 2] [-vms 2] [-runs N] [packages]
//	vmtest repin  [-kernels "5.10 6.1 6.12 7.2"]
//	vmtest fetch  [-kernels ...]
//	vmtest gate   [-kernels ...] [-vms 2] [-baseline FILE] [-update] [-out out/gate] [packages]
//
// gate is the regression gate (package vmtest/gate): it exits 0
// when every figure holds, 1 when one regressed, 2 when it could not run.
//
// See package vmtest for the exit codes.
package main

import (
	"github.com/xdpshield/xdpshield/vmtest/kernels"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xdpshield/xdpshield/vmtest"
	"github.com/xdpshield/xdpshield/vmtest/gate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		slog.Error("vmtest", kernels.LogErr, err)
		if code == vmtest.ExitPass {
			code = vmtest.ExitHarnessError
		}
	}
	os.Exit(int(code))
}

func usage() error {
	return errors.New("usage: vmtest matrix|repin|fetch|gate [flags] (see -h of each)")
}

func run(ctx context.Context, args []string) (vmtest.ExitCode, error) {
	if len(args) == 0 {
		return vmtest.ExitHarnessError, usage()
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	kernelList := fs.String("kernels", "5.10 6.1 6.12 7.2", "kernels to use, by lock name")
	cache := fs.String("cache", kernels.DefaultCacheDir(), "kernel cache directory (outside the repository)")
	verbose := fs.Bool("v", false, "debug logs and the live kernel console")
	out := fs.String("out", "out/vmtest", "matrix: directory for matrix.txt and matrix.json")
	bootTimeout := fs.Duration("boot-timeout", 60*time.Second, "matrix: budget from qemu start to the guest's init")
	timeout := fs.Duration("timeout", 8*time.Minute, "matrix: budget of one kernel's VM (a binary stuck in the kernel outlives -test.timeout)")
	testFlags := fs.String("testflags", "-test.short -test.v", "matrix: flags for every test binary")
	mem := fs.Int("memory", 1024, "matrix: guest memory, MiB")
	cpus := fs.Int("cpus", 2, "matrix: vCPUs per guest")
	vms := fs.Int("vms", 1, "matrix, gate: kernels booted at once (a TCG VM keeps one host thread busy: 2 on a 2-core host)")
	runs := fs.Int("runs", 1, "matrix: run the matrix this many times and report pass counts per kernel (a soak)")
	tools := fs.String("tools", strings.Join(vmtest.DefaultTools, ","), "matrix: host programs copied into the guest")
	modules := fs.String("modules", strings.Join(kernels.DefaultModules, ","), "matrix: kernel modules loaded in the guest (with their dependencies)")
	g := gateFlags{}
	fs.StringVar(&g.baseline, "baseline", "fixtures/gate/baseline.json", "gate: the baseline to compare with")
	fs.BoolVar(&g.update, "update", false, "gate: rewrite the baseline from this run (clean tree, everything passing)")
	fs.StringVar(&g.from, "from", "", "gate: with -update, take the figures from this report (a gate.json of the same clean revision) instead of running again")
	fs.BoolVar(&g.host, "host", true, "gate: measure the host kernel too")
	fs.StringVar(&g.hostPkgs, "host-packages", strings.Join(gate.Packages, " "), "gate: behaviour packages run on the host")
	fs.StringVar(&g.speedBase, "speed-base", "", "gate: the revision (or a directory of objects, a checkout's bpf/) whose programs the host's paths are timed against, in the same rounds (default: the baseline's revision; a branch gives its merge base)")
	fs.BoolVar(&g.subset, "subset", false, "gate: compare only the kernels of this run with the baseline's (local checks; the full gate needs the same set)")
	fs.StringVar(&g.matrixOut, "matrix-out", "", "gate: also write the matrix report of the VMs there (CI: out/vmtest)")
	fs.Float64Var(&g.th.Complexity, "threshold", gate.DefaultThresholds.Complexity, "gate: largest accepted growth of instructions processed or program size")
	fs.Float64Var(&g.th.SpreadFactor, "spread-factor", gate.DefaultThresholds.SpreadFactor, "gate: accepted speed-ratio growth, in multiples of the larger measured run-to-run spread")
	fs.Float64Var(&g.th.MinSpeed, "min-speed-tolerance", gate.DefaultThresholds.MinSpeed, "gate: the speed tolerance never goes under this")
	fs.Float64Var(&g.th.VsBase, "speed-threshold", gate.DefaultThresholds.VsBase, "gate: largest accepted slow-down of a host path against the base revision's program timed in the same rounds")
	if err := fs.Parse(args[1:]); err != nil {
		return vmtest.ExitHarnessError, err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	c := &kernels.Cache{Dir: *cache, Log: log}
	names := strings.Fields(*kernelList)

	switch args[0] {
	case "repin":
		return repin(ctx, c, names)
	case "fetch":
		l, _, err := kernels.LoadLock(".")
		if err != nil {
			return vmtest.ExitHarnessError, err
		}
		for _, n := range names {
			p, err := l.Find(n)
			if err != nil {
				return vmtest.ExitHarnessError, err
			}
			k, err := c.Fetch(ctx, p)
			if err != nil {
				return vmtest.ExitHarnessError, err
			}
			fmt.Printf("%s\t%s\t%s\n", n, p.Release, k.Vmlinuz)
		}
		return vmtest.ExitPass, nil
	case "matrix":
		m := &vmtest.Matrix{
			Cache: c, Kernels: names, Packages: fs.Args(),
			TestFlags: strings.Fields(*testFlags), BootTimeout: *bootTimeout, Timeout: *timeout,
			MemoryMiB: *mem, CPUs: *cpus, VMs: *vms, Output: os.Stdout, Log: log,
			Tools: splitList(*tools), Modules: splitList(*modules),
		}
		if *verbose {
			m.Console = os.Stderr
		}
		if *runs > 1 {
			return soak(ctx, m, *runs, *out)
		}
		rep, code, err := m.Run(ctx)
		if rep != nil {
			if werr := rep.Write(*out, os.Stdout); werr != nil && err == nil {
				err = werr
			}
		}
		return code, err
	case "gate":
		if *out == "out/vmtest" {
			*out = "out/gate"
		}
		pkgs := fs.Args()
		if len(pkgs) == 0 {
			pkgs = gate.Packages
		}
		cfg := gate.Config{
			Dir: ".", Kernels: names, Host: g.host, Packages: pkgs, HostPackages: strings.Fields(g.hostPkgs),
			TestFlags: strings.Fields(*testFlags), Cache: c, BootTimeout: *bootTimeout, Timeout: *timeout,
			MemoryMiB: *mem, VMs: *vms, Output: os.Stdout, Log: log,
		}
		return runGate(ctx, cfg, g, *out)
	}
	return vmtest.ExitHarnessError, usage()
}

type gateFlags struct {
	baseline, hostPkgs, matrixOut string
	from                          string
	speedBase                     string
	update, host, subset          bool
	th                            gate.Thresholds
}

// runGate collects the figures, then compares them with the baseline or,
// with -update, rewrites it.
func runGate(ctx context.Context, cfg gate.Config, g gateFlags, out string) (vmtest.ExitCode, error) {
	start := time.Now()
	rev, dirty, err := gate.Git(ctx, cfg.Dir, g.baseline)
	if err != nil {
		return vmtest.ExitHarnessError, err
	}
	if g.update && dirty {
		return vmtest.ExitHarnessError, fmt.Errorf("%w: the tree has uncommitted changes (git status); commit them first, so the baseline names the revision it measured", gate.ErrBaseline)
	}
	var base *gate.Baseline
	if !g.update {
		if base, err = gate.ReadBaseline(g.baseline); err != nil {
			return vmtest.ExitHarnessError, err
		}
	}
	var notes []string
	if base != nil {
		obj, cleanup, err := speedBase(ctx, cfg.Dir, g.speedBase, base.Revision)
		if err != nil {
			notes = append(notes, fmt.Sprintf("speed: no base program (%v); the paths are compared with the baseline's ratios to XDP_DROP", err))
		}
		defer cleanup()
		cfg.SpeedBase = obj
	}
	if g.from != "" {
		if !g.update {
			return vmtest.ExitHarnessError, fmt.Errorf("-from takes the figures of a baseline: it needs -update")
		}
		figs, err := gate.ReportFigures(g.from, rev)
		if err != nil {
			return vmtest.ExitHarnessError, err
		}
		return writeBaseline(g, rev, dirty, figs)
	}
	figs, mrep, err := cfg.Collect(ctx)
	if mrep != nil && g.matrixOut != "" {
		if werr := mrep.Write(g.matrixOut, os.Stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return vmtest.ExitHarnessError, err
	}
	if g.update {
		return writeBaseline(g, rev, dirty, figs)
	}
	ids := kernelIDs(figs)
	rep := &gate.Report{Started: start.UTC(), Revision: rev, Baseline: base.Revision, Thresholds: g.th, Kernels: ids, Figures: figs, Notes: notes}
	for _, f := range figs {
		for _, n := range f.Notes {
			rep.Notes = append(rep.Notes, f.Kernel+": "+n)
		}
	}
	if dirty {
		rep.Revision += " (with uncommitted changes)"
	}
	check := base
	if g.subset {
		check = base.Subset(ids)
	}
	if err := check.Check(ids); err != nil {
		return vmtest.ExitHarnessError, err
	}
	for _, id := range ids {
		for _, o := range base.Kernels {
			if id.Name == gate.Host && o.Name == gate.Host && o.Release != id.Release {
				rep.Notes = append(rep.Notes, fmt.Sprintf("the host runs %s, the baseline's host ran %s: host figures may differ for that reason alone", id.Release, o.Release))
			}
		}
	}
	rep.Rows = gate.Compare(base, figs, g.th)
	for _, r := range rep.Rows {
		if r.Fail {
			rep.Failed++
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	if err := rep.Write(out, os.Stdout); err != nil {
		return vmtest.ExitHarnessError, err
	}
	if rep.Failed > 0 {
		return vmtest.ExitTestFailure, nil
	}
	return vmtest.ExitPass, nil
}

func kernelIDs(figs []gate.Figures) []gate.KernelID {
	var ids []gate.KernelID
	for _, f := range figs {
		ids = append(ids, gate.KernelID{Name: f.Kernel, Release: f.Release})
	}
	return ids
}

// writeBaseline writes figs as the baseline of revision rev, refusing
// figures of a kernel that failed.
func writeBaseline(g gateFlags, rev string, dirty bool, figs []gate.Figures) (vmtest.ExitCode, error) {
	for _, f := range figs {
		if len(f.Errors) > 0 {
			return vmtest.ExitHarnessError, fmt.Errorf("%w: kernel %s: %s", gate.ErrBaseline, f.Kernel, strings.Join(f.Errors, "; "))
		}
		for name, b := range f.Behaviour {
			if b.Fail > 0 || b.Exit != 0 {
				return vmtest.ExitHarnessError, fmt.Errorf("%w: kernel %s: %s fails: %s", gate.ErrBaseline, f.Kernel, name, strings.Join(b.Failed, "; "))
			}
		}
	}
	ids := kernelIDs(figs)
	b := &gate.Baseline{Revision: rev, Dirty: dirty, Created: time.Now().UTC(), Kernels: ids, Figures: figs}
	if err := os.MkdirAll(filepath.Dir(g.baseline), 0o755); err != nil {
		return vmtest.ExitHarnessError, err
	}
	if err := b.Write(g.baseline); err != nil {
		return vmtest.ExitHarnessError, err
	}
	slog.Info("baseline rewritten", kernels.LogPath, g.baseline, kernels.LogKernel, fmt.Sprint(ids))
	return vmtest.ExitPass, nil
}

// speedBase is the directory of the base objects the host's paths are
// timed against (gate.SpeedObjects, under their names in bpf/): the
// directory arg names, or the objects as committed at revision arg (the
// baseline's revision when arg is empty), written to a temporary
// directory. An object the revision does not have is left out: its paths
// have no base, and the report says so.
func speedBase(ctx context.Context, dir, arg, baselineRev string) (string, func(), error) {
	nothing := func() {}
	if arg != "" {
		if st, err := os.Stat(arg); err == nil {
			if !st.IsDir() {
				return "", nothing, fmt.Errorf("-speed-base %s: give a revision or a directory holding the objects (a checkout's bpf/), not a file", arg)
			}
			return arg, nothing, nil
		}
	}
	rev := arg
	if rev == "" {
		rev = baselineRev
	}
	tmp, err := os.MkdirTemp("", "xdpshield-speed-base-")
	if err != nil {
		return "", nothing, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	var found []string
	var missing []error // git's own words for each object not there
	for _, o := range gate.SpeedObjects {
		show := exec.CommandContext(ctx, "git", "show", rev+":bpf/"+o.File)
		show.Dir = dir
		obj, err := show.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
			}
			slog.Info("speed base: no object", kernels.LogPath, "bpf/"+o.File, "revision", rev, "err", err)
			missing = append(missing, fmt.Errorf("git show %s:bpf/%s: %w", rev, o.File, err))
			continue
		}
		if err := os.WriteFile(filepath.Join(tmp, o.File), obj, 0o644); err != nil {
			cleanup()
			return "", nothing, err
		}
		found = append(found, o.File)
	}
	if len(found) == 0 {
		cleanup()
		return "", nothing, errors.Join(missing...)
	}
	slog.Info("speed base", kernels.LogPath, tmp, "revision", rev, "objects", strings.Join(found, " "))
	return tmp, cleanup, nil
}

func repin(ctx context.Context, c *kernels.Cache, names []string) (vmtest.ExitCode, error) {
	root, err := kernels.ModuleRoot(".")
	if err != nil {
		return vmtest.ExitHarnessError, err
	}
	path := filepath.Join(root, kernels.DefaultLockPath)
	suites := map[string]string{}
	for k, v := range kernels.DefaultSuites {
		suites[k] = v
	}
	if old, err := kernels.ReadLock(path); err == nil {
		for _, k := range old.Kernels {
			suites[k.Name] = k.Suite
		}
	}
	l, err := c.Repin(ctx, names, suites)
	if err != nil {
		return vmtest.ExitHarnessError, err
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return vmtest.ExitHarnessError, err
	}
	if err := l.Format(f); err != nil {
		f.Close()
		return vmtest.ExitHarnessError, err
	}
	if err := f.Close(); err != nil {
		return vmtest.ExitHarnessError, err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return vmtest.ExitHarnessError, err
	}
	slog.Info("lock rewritten", kernels.LogPath, path)
	return vmtest.ExitPass, nil
}

// soak runs m n times, each run's report in out/run-I, and prints how many
// runs passed on each kernel; it fails unless every run passed everywhere.
func soak(ctx context.Context, m *vmtest.Matrix, n int, out string) (vmtest.ExitCode, error) {
	passed := map[string]int{}
	code := vmtest.ExitPass
	var errs []error
	for i := 1; i <= n && ctx.Err() == nil; i++ {
		slog.Info("soak run", "run", i, "of", n)
		rep, c, err := m.Run(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("run %d: %w", i, err))
		}
		if c > code {
			code = c
		}
		if rep == nil {
			continue
		}
		if werr := rep.Write(filepath.Join(out, fmt.Sprintf("run-%d", i)), io.Discard); werr != nil {
			errs = append(errs, werr)
		}
		for _, k := range rep.Kernels {
			if k.Code == int(vmtest.ExitPass) {
				passed[k.Name]++
			}
		}
	}
	fmt.Printf("\nsoak: %d runs of %s on %d vCPU(s)\n", n, strings.Join(m.Packages, " "), m.CPUs)
	for _, k := range m.Kernels {
		fmt.Printf("  %-6s passed %d of %d\n", k, passed[k], n)
	}
	return code, errors.Join(errs...)
}

func splitList(s string) []string {
	// Never nil: an empty list means none, not the default.
	return append([]string{}, strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })...)
}
