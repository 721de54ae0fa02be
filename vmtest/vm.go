package vmtest

import (
	"github.com/xdpshield/xdpshield/vmtest/kernels"

	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xdpshield/xdpshield/internal/flock"
)

// ExitCode is what the harness's commands exit with.
type ExitCode int

const (
	ExitPass         ExitCode = 0 // every test binary passed
	ExitTestFailure  ExitCode = 1 // a test binary failed
	ExitHarnessError ExitCode = 2 // the harness could not run the tests
	ExitKernelPanic  ExitCode = 3 // the guest kernel panicked
	ExitBootTimeout  ExitCode = 4 // the guest never reached its init
	ExitRunTimeout   ExitCode = 5 // the VM ran past its budget and was killed
)

func (c ExitCode) String() string {
	switch c {
	case ExitPass:
		return "pass"
	case ExitTestFailure:
		return "test failure"
	case ExitHarnessError:
		return "harness error"
	case ExitKernelPanic:
		return "kernel panic"
	case ExitBootTimeout:
		return "boot timeout"
	case ExitRunTimeout:
		return "run timeout"
	}
	return "exit " + strconv.Itoa(int(c))
}

// Run is one test binary to run in the guest.
type Run struct {
	Name   string   // the package's import path
	Binary string   // host path of the test binary
	Dir    string   // working directory in the guest (a host path, mirrored); "/" when empty
	Args   []string // arguments of the binary (-test.v, -test.run, ...)
}

// VM configures one boot.
type VM struct {
	Kernel  *kernels.Kernel
	Modules []string // DefaultModules when nil
	Runs    []Run
	// Data are host directories mirrored at the same path in the guest
	// (testdata/, fixtures/), so relative paths in tests keep working.
	Data []string
	// Env is added to the guest's environment, after SHIELD_REQUIRE_PRIV=1.
	Env []string
	// Tools are host programs copied into the guest's /usr/sbin (before
	// busybox in PATH) with their shared libraries; DefaultTools when nil.
	// Those missing on the host are left out.
	Tools       []string
	MemoryMiB   int           // 1024 when 0
	CPUs        int           // 2 when 0
	BootTimeout time.Duration // until the guest's init reports; 60s when 0
	Timeout     time.Duration // the whole boot; 15m when 0
	// Output receives the test binaries' output, live. Console, when set,
	// receives the kernel console, live; it is dumped to Output on a panic or
	// a timeout either way.
	Output  io.Writer
	Console io.Writer
	// WorkDir holds the initramfs and the console log; a temporary directory
	// (removed afterwards) when empty.
	WorkDir string
	// Booted, when set, is called once, when the first test binary starts.
	Booted   func()
	CacheDir string // where the VM lock lives: Slots VMs at a time per cache
	Slots    int    // VMs of this cache that may run at once (1 when 0)
	Log      *slog.Logger

	accel string // kvm or tcg, decided at boot
}

// RunResult is the outcome of one Run.
type RunResult struct {
	Name     string
	Exit     int // the binary's exit code; -1 when it never finished
	Output   []string
	Duration time.Duration
}

// Result is the outcome of a boot.
type Result struct {
	Code            ExitCode
	Err             error // why, when Code is not ExitPass or ExitTestFailure
	Accel           string
	Release         string        // uname -r in the guest
	BootToInit      time.Duration // qemu start to the guest's init running
	BootToFirstTest time.Duration // qemu start to the first test binary's start
	// Phases are the guest's uptime at each step of its boot: init (the
	// kernel has booted, initramfs unpacked, and /init mounted proc),
	// mounts, modules (loaded), tests (about to start the first).
	Phases  []Phase
	Wall    time.Duration
	Runs    []RunResult
	Console string // the kernel console (tail)
}

// Phase is a step of the guest's boot and the guest's uptime there.
type Phase struct {
	Name   string  `json:"name"`
	Uptime float64 `json:"uptime_seconds"`
}

// The boot phases /init reports (PHASE lines), in order, with the matrix
// report's row for each.
const (
	phaseInit    = "init"
	phaseMounts  = "mounts"
	phaseModules = "modules"
	phaseTests   = "tests"
)

var bootPhases = []struct{ name, row string }{
	{phaseInit, "guest: /init started at"},
	{phaseMounts, "guest: mounted at"},
	{phaseModules, "guest: modules loaded at"},
	{phaseTests, "guest: first test at"},
}

const marker = "@@VMTEST "

// Boot builds the initramfs, boots the kernel and runs the binaries in
// order, streaming their output. It returns an error only for a harness
// failure before qemu starts; everything after is in Result.
func (vm *VM) Boot(ctx context.Context) (*Result, error) {
	log := vm.Log
	if log == nil {
		log = slog.Default()
	}
	if vm.Output == nil {
		vm.Output = os.Stdout
	}
	work := vm.WorkDir
	if work == "" {
		d, err := os.MkdirTemp("", "vmtest-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		work = d
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	vm.accel = "tcg"
	if kvmUsable() {
		vm.accel = "kvm"
	}
	initrd := filepath.Join(work, "initramfs-"+vm.Kernel.Pin.Name+".cpio")
	if err := vm.buildInitramfs(initrd, log); err != nil {
		return nil, fmt.Errorf("kernel %s: initramfs: %w", vm.Kernel.Pin.Name, err)
	}
	if vm.CacheDir != "" {
		unlock, err := LockSlot(ctx, vm.CacheDir, vm.Slots, log)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	return vm.qemu(ctx, initrd, filepath.Join(work, "console-"+vm.Kernel.Pin.Name+".log"), log)
}

// LockSlot takes a slot of the cache's VM lock: the machine's cores are
// shared. Slot 1 is vm.lock, which every user of the cache takes
// (vmexec, a matrix of one VM at a time); slot i is vm.lock.i. The first
// free slot is taken; when none is, it waits for one until ctx ends.
// Anything CPU-bound that runs beside VMs (the gate's host runs) takes a
// slot too.
func LockSlot(ctx context.Context, dir string, slots int, log *slog.Logger) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for i := 1; i <= max(slots, 1); i++ {
		name := "vm.lock"
		if i > 1 {
			name = fmt.Sprintf("vm.lock.%d", i)
		}
		paths = append(paths, filepath.Join(dir, name))
	}
	_, unlock, err := flock.Take(ctx, paths, 0o644, func() {
		if len(paths) == 1 {
			log.Info("waiting for another VM to finish", kernels.LogLock, paths[0])
		} else {
			log.Info("waiting for a VM slot", kernels.LogLock, paths[0], kernels.LogSlots, slots)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("vm lock: %w", err)
	}
	return unlock, nil
}

var (
	kvmOnce sync.Once
	kvmOK   bool
)

// bootSector is a floppy's boot sector that writes 0x31 to qemu's
// isa-debug-exit port (0xf4) and halts: qemu then exits with status
// 0x31<<1|1 = 99.
var bootSector = func() []byte {
	b := make([]byte, 512)
	copy(b, []byte{
		0xb0, 0x31, // mov al, 0x31
		0xe6, 0xf4, // out 0xf4, al
		0xf4,       // hlt
		0xeb, 0xfd, // jmp to the hlt
	})
	b[510], b[511] = 0x55, 0xaa
	return b
}()

var panicRE = regexp.MustCompile(`Kernel panic - not syncing|end Kernel panic`)

func (vm *VM) qemu(ctx context.Context, initrd, consolePath string, log *slog.Logger) (*Result, error) {
	mem, cpus := vm.MemoryMiB, vm.CPUs
	if mem == 0 {
		mem = 1024
	}
	if cpus == 0 {
		cpus = 2
	}
	bootTimeout, timeout := vm.BootTimeout, vm.Timeout
	if bootTimeout == 0 {
		bootTimeout = 60 * time.Second
	}
	if timeout == 0 {
		timeout = 15 * time.Minute
	}
	res := &Result{Accel: vm.accel}
	cpu := "max"
	if c := os.Getenv("VMTEST_CPU"); c != "" {
		cpu = c
	}
	if res.Accel == "kvm" {
		cpu = "host"
	}
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("qemu-system-x86_64 (qemu-system-x86) not found: %w", err)
	}
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", machine(), "-accel", accelOpts(res.Accel), "-cpu", cpu,
		"-smp", strconv.Itoa(cpus), "-m", strconv.Itoa(mem),
		"-kernel", vm.Kernel.BootImage(), "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 rdinit=/init random.trust_cpu=on mitigations=off tsc=reliable no_timer_check " + cmdlineExtra(),
		"-chardev", "file,id=con,path=" + consolePath, "-serial", "chardev:con",
		"-chardev", "stdio,id=out,signal=off", "-serial", "chardev:out",
	}
	log.Info("boot", kernels.LogKernel, vm.Kernel.Pin.Name, kernels.LogRelease, vm.Kernel.Pin.Release, kernels.LogAccel, res.Accel, kernels.LogCpus, cpus, kernels.LogMemoryMib, mem)
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}

	// Console follower: live copy when asked, for the panic check and dumps.
	stopConsole := make(chan struct{})
	var consoleWG sync.WaitGroup
	if vm.Console != nil {
		consoleWG.Add(1)
		go func() { defer consoleWG.Done(); follow(consolePath, vm.Console, stopConsole) }()
	}

	type event struct {
		line string
		at   time.Time
	}
	events := make(chan event, 256)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			events <- event{strings.TrimRight(sc.Text(), "\r"), time.Now()}
		}
		close(events)
	}()

	booted := false
	exited := -1
	cur := -1
	var curStart time.Time
	var harnessMsg string
	bootTimer := time.NewTimer(bootTimeout)
	defer bootTimer.Stop()
	allTimer := time.NewTimer(timeout)
	defer allTimer.Stop()
	killed := ExitCode(-1)
	var handle func(ev event)
	handle = func(ev event) {
		line := ev.line
		i := strings.Index(line, marker)
		if i < 0 {
			if cur >= 0 {
				res.Runs[cur].Output = append(res.Runs[cur].Output, line)
			}
			fmt.Fprintln(vm.Output, line)
			return
		}
		if i > 0 { // output without a final newline, then the marker
			handle(event{line[:i], ev.at})
		}
		f := strings.Fields(line[i+len(marker):])
		if len(f) == 0 {
			return
		}
		switch f[0] {
		case "BOOTED":
			booted = true
			if len(f) > 1 {
				res.Release = f[1]
			}
			bootTimer.Stop()
			res.BootToInit = ev.at.Sub(start)
			log.Debug("guest init running", kernels.LogKernel, vm.Kernel.Pin.Name, kernels.LogAfter, time.Since(start).Round(time.Millisecond))
		case "BEGIN":
			n, _ := strconv.Atoi(f[1])
			if n < 0 || n >= len(vm.Runs) {
				return
			}
			cur, curStart = n, ev.at
			if res.BootToFirstTest == 0 {
				res.BootToFirstTest = ev.at.Sub(start)
				if vm.Booted != nil {
					vm.Booted()
				}
			}
			for len(res.Runs) <= n {
				res.Runs = append(res.Runs, RunResult{Name: vm.Runs[len(res.Runs)].Name, Exit: -1})
			}
		case "END":
			if cur >= 0 && len(f) > 2 {
				res.Runs[cur].Exit, _ = strconv.Atoi(f[2])
				res.Runs[cur].Duration = ev.at.Sub(curStart)
				// Drop the blank line the guest adds before the marker.
				if o := res.Runs[cur].Output; len(o) > 0 && o[len(o)-1] == "" {
					res.Runs[cur].Output = o[:len(o)-1]
				}
			}
			cur = -1
		case "PHASE":
			if len(f) > 2 {
				if up, err := strconv.ParseFloat(f[2], 64); err == nil {
					res.Phases = append(res.Phases, Phase{Name: f[1], Uptime: up})
				}
			}
		case "HARNESS":
			harnessMsg = strings.Join(f[1:], " ")
			fmt.Fprintln(vm.Output, "vmtest: guest: "+harnessMsg)
		case "EXIT":
			exited, _ = strconv.Atoi(f[1])
		}
	}
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				break loop
			}
			handle(ev)
		case <-bootTimer.C:
			if !booted {
				killed = ExitBootTimeout
				cmd.Process.Kill()
			}
		case <-allTimer.C:
			killed = ExitRunTimeout
			cmd.Process.Kill()
		case <-ctx.Done():
			killed = ExitHarnessError
			cmd.Process.Kill()
		}
	}
	waitErr := cmd.Wait()
	res.Wall = time.Since(start)
	close(stopConsole)
	consoleWG.Wait()
	console, _ := os.ReadFile(consolePath)
	res.Console = tail(string(console), 200)
	for len(res.Runs) < len(vm.Runs) {
		res.Runs = append(res.Runs, RunResult{Name: vm.Runs[len(res.Runs)].Name, Exit: -1})
	}
	dump := func() {
		fmt.Fprintf(vm.Output, "vmtest: kernel %s console (last lines):\n%s\n", vm.Kernel.Pin.Name, indent(res.Console))
	}
	switch {
	case killed == ExitBootTimeout:
		res.Code, res.Err = killed, fmt.Errorf("kernel %s: guest init did not report within %s; VM killed", vm.Kernel.Pin.Name, bootTimeout)
		dump()
	case killed == ExitRunTimeout:
		res.Code, res.Err = killed, fmt.Errorf("kernel %s: VM ran past its %s budget; killed", vm.Kernel.Pin.Name, timeout)
		dump()
	case killed == ExitHarnessError:
		res.Code, res.Err = killed, fmt.Errorf("kernel %s: %w", vm.Kernel.Pin.Name, ctx.Err())
	case panicRE.Match(console):
		res.Code, res.Err = ExitKernelPanic, fmt.Errorf("kernel %s panicked", vm.Kernel.Pin.Name)
		dump()
	case exited == 0:
		res.Code = ExitPass
	case exited == 1:
		res.Code = ExitTestFailure
	case exited > 1:
		res.Code, res.Err = ExitHarnessError, fmt.Errorf("kernel %s: guest: %s", vm.Kernel.Pin.Name, harnessMsg)
		dump()
	default:
		res.Code, res.Err = ExitHarnessError, fmt.Errorf("kernel %s: VM exited without a result (qemu: %v): %s",
			vm.Kernel.Pin.Name, waitErr, strings.TrimSpace(stderr.String()))
		dump()
	}
	return res, nil
}

// follow copies path to w as it grows, until stop is closed (then copies
// the rest).
func follow(path string, w io.Writer, stop <-chan struct{}) {
	var f *os.File
	for f == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	defer f.Close()
	for {
		io.Copy(w, f)
		select {
		case <-stop:
			io.Copy(w, f)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(s, "\r", ""), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	return "  | " + strings.ReplaceAll(s, "\n", "\n  | ")
}

// DefaultTools are the host programs the suites call (xdp-loader, from
// Debian's xdp-tools, with its shared libraries: shield/pin's
// TestDispatcherJoin, which joins its program in libxdp's dispatcher).
var DefaultTools = []string{"ip", "promtool", "tcpdump", "xdp-loader"}

// ErrNoTests is returned when a selection has no test binaries.
var ErrNoTests = errors.New("no test binaries to run")
