// Command vmtest runs the VM matrix and maintains the kernel lock:
//
//	vmtest matrix [-kernels "5.10 6.1"] [-out out/vmtest] [-cpus 2] [-runs N] [packages]
//	vmtest repin  [-kernels "5.10 6.1 6.12 7.2"]
//	vmtest fetch  [-kernels ...]
//
// See package xdpshield/vmtest for the exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"xdpshield/vmtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		slog.Error("vmtest", vmtest.LogErr, err)
		if code == vmtest.ExitPass {
			code = vmtest.ExitHarnessError
		}
	}
	os.Exit(int(code))
}

func usage() error {
	return errors.New("usage: vmtest matrix|repin|fetch [flags] (see -h of each)")
}

func run(ctx context.Context, args []string) (vmtest.ExitCode, error) {
	if len(args) == 0 {
		return vmtest.ExitHarnessError, usage()
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	kernels := fs.String("kernels", "5.10 6.1 6.12 7.2", "kernels to use, by lock name")
	cache := fs.String("cache", vmtest.DefaultCacheDir(), "kernel cache directory (outside the repository)")
	verbose := fs.Bool("v", false, "debug logs and the live kernel console")
	out := fs.String("out", "out/vmtest", "matrix: directory for matrix.txt and matrix.json")
	bootTimeout := fs.Duration("boot-timeout", 60*time.Second, "matrix: budget from qemu start to the guest's init")
	timeout := fs.Duration("timeout", 8*time.Minute, "matrix: budget of one kernel's VM (a binary stuck in the kernel outlives -test.timeout)")
	testFlags := fs.String("testflags", "-test.short -test.v", "matrix: flags for every test binary")
	mem := fs.Int("memory", 1024, "matrix: guest memory, MiB")
	cpus := fs.Int("cpus", 2, "matrix: vCPUs per guest")
	runs := fs.Int("runs", 1, "matrix: run the matrix this many times and report pass counts per kernel (a soak)")
	tools := fs.String("tools", strings.Join(vmtest.DefaultTools, ","), "matrix: host programs copied into the guest")
	modules := fs.String("modules", strings.Join(vmtest.DefaultModules, ","), "matrix: kernel modules loaded in the guest (with their dependencies)")
	if err := fs.Parse(args[1:]); err != nil {
		return vmtest.ExitHarnessError, err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	c := &vmtest.Cache{Dir: *cache, Log: log}
	names := strings.Fields(*kernels)

	switch args[0] {
	case "repin":
		return repin(ctx, c, names)
	case "fetch":
		l, _, err := vmtest.LoadLock(".")
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
			MemoryMiB: *mem, CPUs: *cpus, Output: os.Stdout, Log: log,
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
	}
	return vmtest.ExitHarnessError, usage()
}

func repin(ctx context.Context, c *vmtest.Cache, names []string) (vmtest.ExitCode, error) {
	root, err := vmtest.ModuleRoot(".")
	if err != nil {
		return vmtest.ExitHarnessError, err
	}
	path := filepath.Join(root, vmtest.DefaultLockPath)
	suites := map[string]string{}
	for k, v := range vmtest.DefaultSuites {
		suites[k] = v
	}
	if old, err := vmtest.ReadLock(path); err == nil {
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
	slog.Info("lock rewritten", vmtest.LogPath, path)
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
	out := []string{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, f)
	}
	return out
}
