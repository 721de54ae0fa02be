// Command vmtest runs the VM matrix and maintains the kernel lock:
//
//	vmtest matrix [-kernels "5.10 6.1"] [-out out/vmtest] [packages]
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
			MemoryMiB: *mem, Output: os.Stdout, Log: log,
			Tools: splitList(*tools), Modules: splitList(*modules),
		}
		if *verbose {
			m.Console = os.Stderr
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

func splitList(s string) []string {
	out := []string{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, f)
	}
	return out
}
