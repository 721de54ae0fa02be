// Command vmexec runs one test binary inside a pinned kernel under qemu, for
// `go test -exec`:
//
//	CGO_ENABLED=0 go test -exec 'go run github.com/xdpshield/xdpshield/vmtest/cmd/vmexec -kernel 6.1' ./sim/...
//
// (go test runs the exec command in the package's directory, so name the
// command by import path, not ./vmtest/...). The binary runs as root in the
// guest with SHIELD_REQUIRE_PRIV=1, in a mirror of the package directory with
// its testdata/ and the module's fixtures/. Output streams live; the exit
// code is the binary's, or one of vmtest's harness codes (2 harness error,
// 3 kernel panic, 4 boot timeout, 5 run timeout).
package main

import (
	"github.com/xdpshield/xdpshield/vmtest/kernels"

	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xdpshield/xdpshield/vmtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmexec:", err)
		if code == 0 {
			code = int(vmtest.ExitHarnessError)
		}
	}
	os.Exit(code)
}

func run(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("vmexec", flag.ContinueOnError)
	kernel := fs.String("kernel", "6.1", "kernel to boot, by its name in fixtures/kernels.lock")
	cache := fs.String("cache", kernels.DefaultCacheDir(), "kernel cache directory")
	bootTimeout := fs.Duration("boot-timeout", 60*time.Second, "budget from qemu start to the guest's init")
	timeout := fs.Duration("timeout", 15*time.Minute, "budget of the whole VM")
	mem := fs.Int("memory", 1024, "guest memory, MiB")
	tools := fs.String("tools", strings.Join(vmtest.DefaultTools, ","), "host programs copied into the guest")
	modules := fs.String("modules", strings.Join(kernels.DefaultModules, ","), "kernel modules loaded in the guest (with their dependencies)")
	console := fs.Bool("console", false, "stream the kernel console to stderr")
	verbose := fs.Bool("v", false, "debug logs")
	if err := fs.Parse(args); err != nil {
		return int(vmtest.ExitHarnessError), err
	}
	if fs.NArg() == 0 {
		return int(vmtest.ExitHarnessError), errors.New("usage: vmexec [-kernel 6.1] test-binary [args...]")
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	wd, err := os.Getwd()
	if err != nil {
		return int(vmtest.ExitHarnessError), err
	}
	lock, root, err := kernels.LoadLock(wd)
	if err != nil {
		return int(vmtest.ExitHarnessError), err
	}
	pin, err := lock.Find(*kernel)
	if err != nil {
		return int(vmtest.ExitHarnessError), err
	}
	c := &kernels.Cache{Dir: *cache, Log: log}
	k, err := c.Fetch(ctx, pin)
	if err != nil {
		return int(vmtest.ExitHarnessError), err
	}
	bin, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		return int(vmtest.ExitHarnessError), err
	}
	vm := &vmtest.VM{
		Kernel:    k,
		Runs:      []vmtest.Run{{Name: filepath.Base(bin), Binary: bin, Dir: wd, Args: fs.Args()[1:]}},
		Data:      []string{filepath.Join(wd, "testdata"), filepath.Join(root, "fixtures")},
		MemoryMiB: *mem, BootTimeout: *bootTimeout, Timeout: *timeout,
		Output: os.Stdout, CacheDir: *cache, Log: log,
		Tools: splitList(*tools), Modules: splitList(*modules),
	}
	if *console {
		vm.Console = os.Stderr
	}
	res, err := vm.Boot(ctx)
	if err != nil {
		return int(vmtest.ExitHarnessError), err
	}
	log.Debug("vm done", kernels.LogKernel, pin.Name, kernels.LogAccel, res.Accel, kernels.LogBootToInit, res.BootToInit, kernels.LogBootToFirstTest, res.BootToFirstTest, kernels.LogWall, res.Wall)
	switch res.Code {
	case vmtest.ExitPass:
		return 0, nil
	case vmtest.ExitTestFailure:
		if len(res.Runs) > 0 && res.Runs[0].Exit > 0 {
			return res.Runs[0].Exit, nil
		}
		return 1, nil
	}
	return int(res.Code), res.Err
}

func splitList(s string) []string {
	// Never nil: an empty list means none, not the default.
	return append([]string{}, strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })...)
}
