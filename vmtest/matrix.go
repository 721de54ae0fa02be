package vmtest

import (
	"bytes"

	"github.com/xdpshield/xdpshield/vmtest/kernels"

	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Matrix runs test packages on several pinned kernels, one VM per kernel,
// one VM at a time.
type Matrix struct {
	Cache       *kernels.Cache
	Kernels     []string // lock names
	Packages    []string // go package patterns; "./..." when empty
	TestFlags   []string // for every binary, e.g. -test.short -test.v
	Modules     []string // DefaultModules when nil
	Tools       []string // DefaultTools when nil
	BootTimeout time.Duration
	Timeout     time.Duration // per kernel
	MemoryMiB   int
	CPUs        int       // vCPUs per VM; 2 when 0
	Dir         string    // module directory; "." when empty
	Output      io.Writer // live test output, prefixed with the kernel
	Console     io.Writer // live kernel console, when set
	Log         *slog.Logger
	// Extra are more runs of packages' binaries in the same boots, each
	// with its own arguments after TestFlags, reported as cells of their
	// own name (the regression gate's compat and measurement runs).
	Extra []ExtraRun
	// VMs is how many kernels boot at once (1 when 0). Under TCG a VM
	// runs on one host thread (accelOpts), so a 2-core host runs two
	// side by side; each takes a slot of the cache's VM lock.
	VMs int
	// Built, when set, is called once the binaries are built and before
	// the first boot, with each package's binary by import path (static,
	// stripped): the gate's host runs use them beside the VMs.
	Built func(bins map[string]Binary)
	// Booted, when set, is called when a kernel's first test starts (or
	// its boot ends without one), once per boot.
	Booted func(kernel string)
	// Spare, when set, is called once, when a VM slot has no kernel left
	// to boot: at once when there are fewer kernels than slots, else when
	// the first slot runs out of work (the gate's host runs go there, so
	// they never share the cores with VMs filling them).
	Spare func()
}

// Binary is a package's built test binary.
type Binary struct {
	Path string // on the host
	Dir  string // the package's directory
}

// BinaryName is the file name of package path's test binary ("./shield/datapath"
// is ._shield_datapath.test): one name per package wherever one is built
// or linked.
func BinaryName(path string) string { return strings.ReplaceAll(path, "/", "_") + ".test" }

// ExtraRun is one more run of a package's test binary.
type ExtraRun struct {
	Name    string   // the cell's name, e.g. "github.com/xdpshield/xdpshield/shield/datapath -datapath.compat"
	Package string   // a package pattern naming one package, e.g. ./sim
	Args    []string // after the matrix's TestFlags
}

type builtPkg struct {
	path, dir, bin string
	buildErr       string
	args           []string // an extra run's own arguments
}

func (m *Matrix) logger() *slog.Logger {
	if m.Log == nil {
		return slog.Default()
	}
	return m.Log
}

// build compiles a static test binary per package that has tests.
func (m *Matrix) build(ctx context.Context, dir, work string) ([]builtPkg, error) {
	pats := m.Packages
	if len(pats) == 0 {
		pats = []string{"./..."}
	}
	for _, e := range m.Extra {
		pats = append(pats, e.Package)
	}
	args := append([]string{"list", "-e", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{len .TestGoFiles}}\t{{len .XTestGoFiles}}"}, pats...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", strings.Join(pats, " "), err, stderr.String())
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		m.logger().Warn("go list", kernels.LogStderr, s)
	}
	var pkgs []builtPkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 || (f[2] == "0" && f[3] == "0") {
			continue
		}
		if slices.ContainsFunc(pkgs, func(p builtPkg) bool { return p.path == f[0] }) {
			continue // named by a pattern and by an extra run
		}
		pkgs = append(pkgs, builtPkg{path: f[0], dir: f[1]})
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%s: %w", strings.Join(pats, " "), ErrNoTests)
	}
	// One go test -c for every package: go links the binaries side by
	// side (11 s here for the matrix's ten, 17-25 s one after the other).
	// It names each binary after the last element of the import path, so
	// packages sharing one, and a build that fails (whose error must name
	// its package), are built one at a time.
	bins := filepath.Join(work, "bin")
	if err := os.MkdirAll(bins, 0o755); err != nil {
		return nil, err
	}
	base := map[string]bool{}
	together := true
	for _, p := range pkgs {
		b := path.Base(p.path)
		together = together && !base[b]
		base[b] = true
	}
	if together {
		start := time.Now()
		args := []string{"test", "-c", "-ldflags=-s -w", "-o", bins + "/"}
		for _, p := range pkgs {
			args = append(args, p.path)
		}
		b := exec.CommandContext(ctx, "go", args...)
		b.Dir = dir
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			together = false
			m.logger().Warn("building the test binaries together failed; one at a time", kernels.LogErr, err, kernels.LogStderr, strings.TrimSpace(string(out)))
		} else {
			for i := range pkgs {
				pkgs[i].bin = filepath.Join(bins, path.Base(pkgs[i].path)+".test")
			}
			m.logger().Info("built test binaries", kernels.LogPackages, len(pkgs), kernels.LogTook, time.Since(start).Round(time.Millisecond))
		}
	}
	for i := range pkgs {
		if together {
			break
		}
		p := &pkgs[i]
		p.bin = filepath.Join(bins, BinaryName(p.path))
		start := time.Now()
		// Stripped (-s -w: no symbol table, no DWARF; stack traces keep
		// their names): a smaller initramfs boots faster under TCG.
		b := exec.CommandContext(ctx, "go", "test", "-c", "-ldflags=-s -w", "-o", p.bin, p.path)
		b.Dir = dir
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			p.buildErr = strings.TrimSpace(string(out))
			m.logger().Error("build test binary", kernels.LogPackage, p.path, kernels.LogErr, err)
		} else {
			m.logger().Info("built test binary", kernels.LogPackage, p.path, kernels.LogTook, time.Since(start).Round(time.Millisecond))
		}
	}
	return pkgs, nil
}

// extraPkgs resolves each extra run to its package's built binary.
func (m *Matrix) extraPkgs(ctx context.Context, dir string, pkgs []builtPkg) ([]builtPkg, error) {
	var out []builtPkg
	for _, e := range m.Extra {
		cmd := exec.CommandContext(ctx, "go", "list", "-e", "-f", "{{.ImportPath}}", e.Package)
		cmd.Dir = dir
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list %s: %w", e.Package, err)
		}
		path := strings.TrimSpace(string(b))
		i := slices.IndexFunc(pkgs, func(p builtPkg) bool { return p.path == path })
		if i < 0 {
			return nil, fmt.Errorf("extra run %q: package %s has no tests", e.Name, path)
		}
		p := pkgs[i]
		p.path, p.args = e.Name, e.Args
		out = append(out, p)
	}
	return out, nil
}

// withoutExtraOnly drops the packages built only because an extra run
// names them: they get no plain run.
func (m *Matrix) withoutExtraOnly(ctx context.Context, dir string, pkgs []builtPkg) []builtPkg {
	if len(m.Extra) == 0 {
		return pkgs
	}
	pats := m.Packages
	if len(pats) == 0 {
		return pkgs
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-e", "-f", "{{.ImportPath}}"}, pats...)...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return pkgs
	}
	named := strings.Fields(string(b))
	return slices.DeleteFunc(pkgs, func(p builtPkg) bool { return !slices.Contains(named, p.path) })
}

// PrefixWriter returns a writer that prefixes every line written through
// it to w (a kernel's or the host's name before each line of a run). It
// writes whole lines only: a line without its newline waits for the next
// write.
func PrefixWriter(w io.Writer, prefix string) io.Writer {
	return &prefixWriter{w: w, prefix: prefix}
}

// prefixWriter writes whole lines, each in one Write under outMu: VMs
// and the gate's host runs share one output, side by side.
type prefixWriter struct {
	w      io.Writer
	prefix string
	part   []byte // a line not yet ended
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var sb strings.Builder
	rest := b
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		sb.WriteString(p.prefix)
		sb.Write(p.part)
		sb.Write(rest[:i+1])
		p.part, rest = p.part[:0], rest[i+1:]
	}
	p.part = append(p.part, rest...)
	if sb.Len() == 0 {
		return len(b), nil
	}
	outMu.Lock()
	defer outMu.Unlock()
	_, err := io.WriteString(p.w, sb.String())
	return len(b), err
}

var outMu sync.Mutex

// worse orders exit codes by how much they say about the run.
func worse(a, b ExitCode) ExitCode {
	rank := map[ExitCode]int{ExitPass: 0, ExitTestFailure: 1, ExitRunTimeout: 2, ExitBootTimeout: 3, ExitKernelPanic: 4, ExitHarnessError: 5}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// Run builds the binaries, boots each kernel in turn and returns the report
// and the worst exit code. The error is set for a harness failure that
// stopped the matrix early.
func (m *Matrix) Run(ctx context.Context) (*Report, ExitCode, error) {
	dir := m.Dir
	if dir == "" {
		dir = "."
	}
	lock, root, err := kernels.LoadLock(dir)
	if err != nil {
		return nil, ExitHarnessError, err
	}
	rep := &Report{Started: time.Now().UTC(), Accel: "tcg"}
	if kvmUsable() {
		rep.Accel = "kvm"
	}
	pins := make([]*kernels.Pin, len(m.Kernels))
	for i, n := range m.Kernels {
		if pins[i], err = lock.Find(n); err != nil {
			return nil, ExitHarnessError, err
		}
	}
	work, err := os.MkdirTemp("", "vmtest-matrix-")
	if err != nil {
		return nil, ExitHarnessError, err
	}
	defer os.RemoveAll(work)
	pkgs, err := m.build(ctx, dir, work)
	if err != nil {
		return nil, ExitHarnessError, err
	}
	extra, err := m.extraPkgs(ctx, dir, pkgs)
	if err != nil {
		return nil, ExitHarnessError, err
	}
	bins := map[string]Binary{}
	for _, p := range pkgs {
		if p.buildErr == "" {
			bins[p.path] = Binary{Path: p.bin, Dir: p.dir}
		}
	}
	pkgs = m.withoutExtraOnly(ctx, dir, pkgs)
	var runs []Run
	var runPkgs []builtPkg
	for _, p := range append(slices.Clone(pkgs), extra...) {
		rep.Packages = append(rep.Packages, p.path)
		if p.buildErr == "" {
			runs = append(runs, Run{Name: p.path, Binary: p.bin, Dir: p.dir, Args: append(slices.Clone(m.TestFlags), p.args...)})
			runPkgs = append(runPkgs, p)
		}
	}
	pkgs = append(pkgs, extra...)
	rep.Runs = map[string][]RunResult{}
	data := []string{filepath.Join(root, "fixtures")}
	for _, p := range runPkgs {
		data = append(data, filepath.Join(p.dir, "testdata"))
	}
	code := ExitPass
	for _, p := range pkgs {
		if p.buildErr != "" {
			code = worse(code, ExitTestFailure)
		}
	}
	if m.Built != nil {
		m.Built(bins)
	}
	// Each kernel's boot on one of m.VMs workers, in the lock's order
	// (longest first is the caller's to choose); the report keeps that
	// order whatever finishes first.
	type done struct {
		kr  KernelReport
		res *Result
	}
	results := make([]done, len(pins))
	slots := max(m.VMs, 1)
	next := make(chan int)
	var wg sync.WaitGroup
	var spare sync.Once
	spareSlot := func() {
		if m.Spare != nil {
			spare.Do(m.Spare)
		}
	}
	if slots > len(pins) {
		spareSlot()
	}
	for range min(slots, len(pins)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer spareSlot()
			for i := range next {
				results[i].kr, results[i].res = m.kernel(ctx, pins[i], runs, data, work, slots)
			}
		}()
	}
	for i := range pins {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for i, pin := range pins {
		kr, res := results[i].kr, results[i].res
		if kr.Name == "" {
			continue // not booted: the context ended first
		}
		code = worse(code, ExitCode(kr.Code))
		rep.Kernels = append(rep.Kernels, kr)
		if res != nil {
			rep.Runs[pin.Name] = res.Runs
		}
		for _, p := range pkgs {
			c := Cell{Kernel: pin.Name, Package: p.path, Status: "not run", Exit: -1}
			if p.buildErr != "" {
				c.Status = "build failed"
				rep.Failures = append(rep.Failures, Failure{Kernel: pin.Name, Package: p.path, Test: "(build)", Output: strings.Split(p.buildErr, "\n")})
			} else if res != nil {
				for _, r := range res.Runs {
					if r.Name == p.path {
						c.fill(r)
						rep.Failures = append(rep.Failures, failures(pin.Name, c, r)...)
					}
				}
			}
			rep.Cells = append(rep.Cells, c)
		}
	}
	rep.SkipDiffs = skipDiffs(rep.Cells)
	rep.Seconds = time.Since(rep.Started).Seconds()
	rep.ExitCode, rep.Verdict = int(code), code.String()
	return rep, code, nil
}

// kernel boots pin (again, once, after an early panic) and reports it.
func (m *Matrix) kernel(ctx context.Context, pin *kernels.Pin, runs []Run, data []string, work string, slots int) (KernelReport, *Result) {
	kr := KernelReport{Name: pin.Name, Release: pin.Release}
	res, err := m.boot(ctx, pin, runs, data, work, slots)
	// A kernel that dies before its init runs has run no test: under
	// TCG a Debian 6.12 kernel double-faulted 0.54 s into one boot of
	// twenty, whatever the suites. Boot it again, once, and say so.
	if err == nil && res.Code == ExitKernelPanic && res.BootToInit == 0 && ctx.Err() == nil {
		m.logger().Warn("kernel panicked before init ran; booting it again", kernels.LogKernel, pin.Name)
		kr.EarlyPanics++
		res, err = m.boot(ctx, pin, runs, data, work, slots)
	}
	if err != nil {
		kr.Code, kr.Verdict, kr.Error = int(ExitHarnessError), ExitHarnessError.String(), err.Error()
		m.logger().Error("kernel", kernels.LogKernel, pin.Name, kernels.LogErr, err)
		return kr, nil
	}
	kr.Code, kr.Verdict = int(res.Code), res.Code.String()
	kr.BootToInitSeconds = res.BootToInit.Seconds()
	kr.BootToFirstTestSeconds = res.BootToFirstTest.Seconds()
	kr.Seconds = res.Wall.Seconds()
	kr.Phases = res.Phases
	if res.Err != nil {
		kr.Error = res.Err.Error()
	}
	return kr, res
}

func (m *Matrix) boot(ctx context.Context, pin *kernels.Pin, runs []Run, data []string, work string, slots int) (*Result, error) {
	k, err := m.Cache.Fetch(ctx, pin)
	if err != nil {
		return nil, err
	}
	out := m.Output
	if out == nil {
		out = io.Discard
	}
	vm := &VM{
		Kernel: k, Modules: m.Modules, Tools: m.Tools, Runs: runs, Data: data,
		MemoryMiB: m.MemoryMiB, CPUs: m.CPUs, BootTimeout: m.BootTimeout, Timeout: m.Timeout,
		Output: PrefixWriter(out, "["+pin.Name+"] "), Console: m.Console,
		WorkDir: work, CacheDir: m.Cache.Dir, Slots: slots, Log: m.Log,
	}
	booted := false
	if m.Booted != nil {
		vm.Booted = func() { booted = true; m.Booted(pin.Name) }
	}
	res, err := vm.Boot(ctx)
	if m.Booted != nil && !booted {
		m.Booted(pin.Name)
	}
	if err != nil {
		return nil, err
	}
	m.logger().Info("kernel done", kernels.LogKernel, pin.Name, kernels.LogVerdict, res.Code.String(),
		kernels.LogBootToFirstTest, res.BootToFirstTest.Round(10*time.Millisecond), kernels.LogWall, res.Wall.Round(100*time.Millisecond))
	return res, nil
}

// maxFailuresShown bounds the failures printed per kernel and package;
// matrix.json has them all.
const maxFailuresShown = 5
