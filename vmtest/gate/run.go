package gate

import (
	"github.com/xdpshield/xdpshield/vmtest/kernels"

	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/vmtest"
)

// The runs of the gate beside the behaviour packages' own: the shield's
// data-plane suite (shield/datapath) again with shield_compat loaded on
// every kernel, and the measurement run.
const (
	CompatRun  = "github.com/xdpshield/xdpshield/shield/datapath -datapath.compat"
	measureRun = "github.com/xdpshield/xdpshield/vmtest/gate -gate.emit"
)

// Packages are the gate's behaviour packages, in the VMs and on the host:
// the simulator's own tests, the shield's, and the shield's data plane in
// the simulator. The Makefile's GATE_PKGS and ci/vmtest.sh's HOST_PKGS
// name the same (TestPackagesAgree).
var Packages = []string{"./sim", "./shield", "./shield/datapath"}

// Config is one gate run.
type Config struct {
	Dir          string         // module root
	Kernels      []string       // VM kernels, lock names; none: the host only
	Host         bool           // measure the host too
	Packages     []string       // behaviour packages run in the VMs (the matrix's)
	HostPackages []string       // behaviour packages run on the host
	TestFlags    []string       // for every test binary
	Cache        *kernels.Cache // kernels
	BootTimeout  time.Duration
	Timeout      time.Duration // per kernel
	MemoryMiB    int
	VMs          int // kernels booted at once (vmtest.Matrix.VMs)
	// SpeedBase is a directory of the base revision's objects
	// (SpeedObjects): the host's measurement times each object's paths
	// against its base (SpeedBaseEnv).
	SpeedBase string
	Output    io.Writer // live test output
	Log       *slog.Logger
}

// extra are the gate's own runs, as the matrix takes them (vm) or as the
// host runs them.
func extra(vm bool) []vmtest.ExtraRun {
	runs := []vmtest.ExtraRun{
		{Name: measureRun, Package: "./vmtest/gate", Args: []string{"-test.run=^TestCollect$", "-gate.emit"}},
	}
	if vm {
		// shield_compat runs in the VMs where the loader chooses it
		// (5.10, 5.11: no BPF_CMPXCHG), in the behaviour packages' own
		// run of shield/datapath; on a newer kernel no shield loads it,
		// and the host proves it there.
		return runs
	}
	// shield_compat differs from shield in refill() alone: the
	// randomised list model (no frame of it reaches a bucket) and the
	// pcap reader are not run again.
	return append(runs, vmtest.ExtraRun{Name: CompatRun, Package: "./shield/datapath", Args: []string{"-datapath.compat", "-test.skip", "^(TestListsModel|TestFixturesReadByTcpdump)$"}})
}

// Collect runs the behaviour packages and the gate's runs on the host and
// in a VM per kernel, and returns each kernel's figures (the host first)
// and the matrix report of the VMs (nil without kernels). The host's runs
// use the matrix's binaries and run on a VM slot the matrix no longer
// needs (Matrix.Spare: with fewer kernels than slots once the first VMs
// have booted, else once the first slot runs out of kernels), holding that
// slot of the VM lock, so they never make a third CPU-bound process beside
// two VMs on a 2-core host, this process's or another's (a
// starved guest's jiffies lag its clock, and the real-clock tests read
// both). The host's speed figures are ratios to a reference timed in the
// same rounds (their spread is in the report).
func (c Config) Collect(ctx context.Context) ([]Figures, *vmtest.Report, error) {
	if len(c.Kernels) == 0 {
		if !c.Host {
			return nil, nil, nil
		}
		f, err := c.host(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		return []Figures{f}, nil, nil
	}
	type hostDone struct {
		f   Figures
		err error
	}
	hostc := make(chan hostDone, 1)
	started := false
	// A failed matrix makes the host's runs moot: they stop with it.
	hostCtx, cancelHost := context.WithCancel(ctx)
	defer cancelHost()
	m := &vmtest.Matrix{
		Cache: c.Cache, Kernels: c.Kernels, Packages: c.Packages, TestFlags: c.TestFlags,
		BootTimeout: c.BootTimeout, Timeout: c.Timeout, MemoryMiB: c.MemoryMiB,
		Dir: c.Dir, Output: c.Output, Log: c.Log, Extra: extra(true), VMs: c.VMs,
	}
	// The host waits for a spare slot and for the boots of the first VMs
	// (as many as run at once), or for the matrix's end.
	first := min(max(c.VMs, 1), len(c.Kernels))
	booted := make(chan struct{})
	spare := make(chan struct{})
	matrixDone := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]bool{} // a kernel booted again (after a panic) counts once
	m.Booted = func(kernel string) {
		mu.Lock()
		defer mu.Unlock()
		if seen[kernel] {
			return
		}
		seen[kernel] = true
		if first--; first == 0 {
			close(booted)
		}
	}
	m.Spare = func() { close(spare) }
	if c.Host {
		m.Built = func(bins map[string]vmtest.Binary) {
			started = true
			// The matrix removes its binaries when it returns, and the
			// host's runs may outlast it: they run from links of their own.
			own, dir, err := linkBinaries(bins)
			go func() {
				defer os.RemoveAll(dir)
				if err != nil {
					hostc <- hostDone{err: err}
					return
				}
				for _, ch := range []chan struct{}{spare, booted} {
					select {
					case <-ch:
					case <-matrixDone:
					}
				}
				// On a slot of the VM lock, so that no other process's
				// VM boots beside the host's runs either.
				unlock, err := vmtest.LockSlot(hostCtx, c.Cache.Dir, max(c.VMs, 1), c.logger())
				if err != nil {
					hostc <- hostDone{err: err}
					return
				}
				defer unlock()
				f, err := c.host(hostCtx, own)
				hostc <- hostDone{f, err}
			}()
		}
	}
	rep, _, err := m.Run(ctx)
	if err != nil {
		cancelHost()
	}
	close(matrixDone)
	var out []Figures
	if started {
		h := <-hostc
		if err == nil && h.err != nil { // else the matrix's error says why
			return nil, rep, h.err
		}
		out = append(out, h.f)
	}
	if err != nil {
		return nil, rep, err
	}
	if c.Host && !started {
		return nil, rep, fmt.Errorf("host runs: the matrix built no binaries")
	}
	for _, k := range rep.Kernels {
		f := figuresOf(k.Name, rep.Runs[k.Name])
		if f.Release == "" {
			f.Release = k.Release
		}
		if k.Error != "" && len(rep.Runs[k.Name]) == 0 {
			f.Errors = append(f.Errors, fmt.Sprintf("kernel %s: %s", k.Name, k.Error))
		}
		out = append(out, f)
	}
	return out, rep, nil
}

// linkBinaries links (or, across file systems, copies) each binary into a
// directory of its own, removed by the caller.
func linkBinaries(bins map[string]vmtest.Binary) (map[string]vmtest.Binary, string, error) {
	dir, err := os.MkdirTemp("", "xdpshield-gate-bins-")
	if err != nil {
		return nil, "", err
	}
	own := map[string]vmtest.Binary{}
	for path, b := range bins {
		dst := filepath.Join(dir, vmtest.BinaryName(path))
		if err := os.Link(b.Path, dst); err != nil {
			data, rerr := os.ReadFile(b.Path)
			if rerr != nil {
				return nil, dir, fmt.Errorf("keep test binary %s: %w", b.Path, rerr)
			}
			if werr := os.WriteFile(dst, data, 0o755); werr != nil {
				return nil, dir, fmt.Errorf("keep test binary %s: %w", b.Path, werr)
			}
		}
		own[path] = vmtest.Binary{Path: dst, Dir: b.Dir}
	}
	return own, dir, nil
}

// figuresOf reads a kernel's runs: the measurement run's figures and every
// other run's behaviour.
func figuresOf(kernel string, runs []vmtest.RunResult) Figures {
	f := Figures{Kernel: kernel}
	found := false
	for _, r := range runs {
		if r.Name == measureRun {
			found = true
			m, err := Parse(r.Output)
			if err != nil {
				f.Errors = append(f.Errors, fmt.Sprintf("measurement run (exit %d): %v; last lines: %s", r.Exit, err, strings.Join(vmtest.LastLines(r.Output, 5), " | ")))
				continue
			}
			f.Release, f.Programs, f.Speed, f.Features, f.Notes = m.Release, m.Programs, m.Speed, m.Features, m.Notes
			f.Errors = append(f.Errors, m.Errors...)
			if r.Exit != 0 {
				f.Errors = append(f.Errors, fmt.Sprintf("measurement run exited %d: %s", r.Exit, strings.Join(failed(vmtest.ParseTestOutput(r.Output)), "; ")))
			}
			continue
		}
		if f.Behaviour == nil {
			f.Behaviour = map[string]Behaviour{}
		}
		f.Behaviour[r.Name] = behaviourOf(r)
	}
	if !found {
		f.Errors = append(f.Errors, "the measurement run did not run")
	}
	return f
}

func behaviourOf(r vmtest.RunResult) Behaviour {
	b := Behaviour{Exit: r.Exit}
	tests := vmtest.ParseTestOutput(r.Output)
	for _, t := range tests {
		switch t.Status {
		case "pass":
			b.Pass++
		case "fail":
			b.Fail++
		case "skip":
			b.Skip++
			if strings.HasPrefix(t.Reason, features.Prefix) {
				b.FeatureSkips++
			}
		}
	}
	b.Failed = failed(tests)
	return b
}

// failed names the failing tests with the first line that says why.
func failed(tests []vmtest.TestResult) []string {
	var out []string
	for _, t := range tests {
		if t.Status != "fail" {
			continue
		}
		why := ""
		for _, l := range t.Output {
			if l != "" && !strings.HasPrefix(l, "Error Trace:") {
				why = l
				break
			}
		}
		// testify's block: "Error:" and the lines after it say what, the
		// "Messages:" line names the figure.
		for i, l := range t.Output {
			if strings.HasPrefix(l, "Error:") {
				why = strings.TrimSpace(strings.TrimPrefix(l, "Error:"))
				for _, m := range t.Output[i+1:] {
					if strings.HasPrefix(m, "Test:") || strings.HasPrefix(m, "Error Trace:") {
						continue
					}
					if msg, ok := strings.CutPrefix(m, "Messages:"); ok {
						why = strings.TrimSpace(msg) + ": " + why
						break
					}
					if len(why) < 200 {
						why += " " + m
					}
				}
				break
			}
		}
		if len(why) > 300 {
			why = why[:300] + "..."
		}
		out = append(out, t.Name+": "+why)
	}
	return out
}

// host runs the same binaries natively: those of bins (the matrix's, by
// import path), and builds the others.
func (c Config) host(ctx context.Context, bins map[string]vmtest.Binary) (Figures, error) {
	work, err := os.MkdirTemp("", "xdpshield-gate-")
	if err != nil {
		return Figures{}, err
	}
	defer os.RemoveAll(work)
	type run struct {
		name, pkg string
		args      []string
	}
	var runs []run
	for _, p := range c.HostPackages {
		runs = append(runs, run{pkg: p})
	}
	for _, e := range extra(false) {
		runs = append(runs, run{name: e.Name, pkg: e.Package, args: e.Args})
	}
	built := map[string]string{}
	for p, b := range bins {
		built[p] = b.Path
	}
	var results []vmtest.RunResult
	for _, r := range runs {
		list := exec.CommandContext(ctx, "go", "list", "-f", "{{.ImportPath}}\t{{.Dir}}", r.pkg)
		list.Dir = c.Dir
		b, err := list.Output()
		if err != nil {
			return Figures{}, fmt.Errorf("go list %s: %w", r.pkg, err)
		}
		path, dir, _ := strings.Cut(strings.TrimSpace(string(b)), "\t")
		bin, ok := built[path]
		if !ok {
			bin = filepath.Join(work, vmtest.BinaryName(path))
			build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, path)
			build.Dir = c.Dir
			if out, err := build.CombinedOutput(); err != nil {
				results = append(results, vmtest.RunResult{Name: cmp(r.name, path), Exit: -1, Output: strings.Split(string(out), "\n")})
				continue
			}
			built[path] = bin
		}
		name := cmp(r.name, path)
		start := time.Now()
		cmd := exec.CommandContext(ctx, bin, append(slices.Clone(c.TestFlags), r.args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SHIELD_REQUIRE_PRIV=1", "VMTEST_KERNEL="+Host)
		if r.name == measureRun && c.SpeedBase != "" {
			cmd.Env = append(cmd.Env, SpeedBaseEnv+"="+c.SpeedBase)
		}
		var buf bytes.Buffer
		w := io.Writer(&buf)
		var live io.Writer
		if c.Output != nil {
			live = vmtest.PrefixWriter(c.Output, "[host] ")
			w = io.MultiWriter(&buf, live)
		}
		cmd.Stdout, cmd.Stderr = w, w
		exit := 0
		if err := cmd.Run(); err != nil {
			exit = -1
			if ee, ok := err.(*exec.ExitError); ok {
				exit = ee.ExitCode()
			}
		}
		if live != nil && buf.Len() > 0 && buf.Bytes()[buf.Len()-1] != '\n' {
			live.Write([]byte{'\n'}) // the last line, unended
		}
		c.logger().Info("host run", kernels.LogPackage, name, kernels.LogTook, time.Since(start).Round(time.Millisecond))
		results = append(results, vmtest.RunResult{Name: name, Exit: exit, Output: strings.Split(buf.String(), "\n"), Duration: time.Since(start)})
	}
	f := figuresOf(Host, results)
	return f, nil
}

func (c Config) logger() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Git reads the tree's revision and whether it has changes other than
// those in ignore (paths relative to the module root).
func Git(ctx context.Context, dir string, ignore ...string) (rev string, dirty bool, err error) {
	b, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		// A copy of the sources (the teeth test's) is no checkout: it can
		// be compared, never made a baseline.
		return "(not a git checkout)", true, nil
	}
	rev = strings.TrimSpace(string(b))
	st, err := exec.CommandContext(ctx, "git", "-C", dir, "status", "--porcelain").Output()
	if err != nil {
		return rev, false, fmt.Errorf("git status: %w", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(st)), "\n") {
		if len(l) < 4 {
			continue
		}
		if !slices.Contains(ignore, strings.TrimSpace(l[3:])) {
			dirty = true
		}
	}
	return rev, dirty, nil
}
