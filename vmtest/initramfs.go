package vmtest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/xdpshield/xdpshield/vmtest/kernels"
)

func (vm *VM) initScript(mods []kernels.Module) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
# Written by xdpshield's vmtest: mount, load modules, check the kernel, run
# the test binaries, report on ttyS1, reboot (qemu -no-reboot exits).
export PATH=/usr/sbin:/usr/bin:/bin:/sbin HOME=/tmp TMPDIR=/tmp
out=/dev/ttyS1
say() { echo "` + marker + `$*" >$out; }
mount -t proc proc /proc
# The guest's uptime at each step of the boot (the matrix's boot phases);
# /init's own start is said once /dev/ttyS1 exists.
read up0 _ </proc/uptime
phase() { read u _ </proc/uptime; say PHASE $1 $u; }
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say PHASE ` + phaseInit + ` $up0
mkdir -p /dev/pts /dev/shm /run /tmp
# No tmpfs on /tmp: the package mirrors live at the host's paths, and a
# clone under /tmp would vanish under it (the rootfs is writable anyway).
mount -t tmpfs tmpfs /run
mkdir -p /run/netns
mount -t bpf bpffs /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
phase ` + phaseMounts + `
say BOOTED "$(uname -r)"
fail() { say "HARNESS $*"; say EXIT 2; sync; reboot -f; sleep 10; }
`)
	fmt.Fprintf(&b, "[ \"$(uname -r)\" = %s ] || fail \"uname -r is $(uname -r), the pin says %s\"\n", shellQuote(vm.Kernel.Pin.Release), vm.Kernel.Pin.Release)
	for _, m := range mods {
		fmt.Fprintf(&b, "insmod /lib/modules/%s.ko >$out 2>&1 || fail \"insmod %s failed\"\n", m.Name, m.Name)
	}
	b.WriteString("phase " + phaseModules + "\nip link set lo up\n")
	b.WriteString("export SHIELD_REQUIRE_PRIV=1\n")
	// Tests may widen timing budgets under emulation (TCG is ~10x slower).
	fmt.Fprintf(&b, "export VMTEST=1 VMTEST_KERNEL=%s VMTEST_ACCEL=%s\n", shellQuote(vm.Kernel.Pin.Name), vm.accel)
	for _, e := range vm.Env {
		k, v, _ := strings.Cut(e, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	b.WriteString("rc=0\nphase " + phaseTests + "\n")
	for i, r := range vm.Runs {
		dir := r.Dir
		if dir == "" {
			dir = "/"
		}
		args := []string{fmt.Sprintf("/tests/%d.test", i)}
		for _, a := range r.Args {
			args = append(args, shellQuote(a))
		}
		fmt.Fprintf(&b, "say BEGIN %d\n(cd %s && exec %s) >$out 2>&1 </dev/null; r=$?\necho >$out\nsay END %d $r\n[ $r -eq 0 ] || rc=1\n",
			i, shellQuote(dir), strings.Join(args, " "), i)
	}
	b.WriteString("say EXIT $rc\nsync\nreboot -f\nsleep 10\n")
	return b.String()
}

func (vm *VM) buildInitramfs(path string, log *slog.Logger) error {
	want := vm.Modules
	if want == nil {
		want = kernels.DefaultModules
	}
	mods, missing, err := kernels.ResolveModules(vm.Kernel.Modules, want)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		log.Debug("modules not shipped as modules (built in or absent)", kernels.LogKernel, vm.Kernel.Pin.Name, kernels.LogModules, strings.Join(missing, " "))
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox (busybox-static) not found: %w", err)
	}
	if err := requireStatic(bb); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	c := newCPIO(w)
	for _, d := range []string{"dev", "proc", "sys", "tmp", "run", "etc", "root", "sbin", "usr/bin", "usr/sbin"} {
		c.Dir(d)
	}
	c.CharDev("dev/console", 5, 1)
	c.CharDev("dev/null", 1, 3)
	c.HostFile("bin/busybox", bb, 0o755)
	for _, app := range busyboxApplets(bb) {
		if app != "busybox" {
			c.Symlink("bin/"+app, "busybox")
		}
	}
	c.Symlink("var/run", "/run")
	tools := vm.Tools
	if tools == nil {
		tools = DefaultTools
	}
	// A tool goes in only when some test binary names it (they find tools
	// with exec.LookPath("name")): promtool alone is 48 MB, and every
	// megabyte is unpacked at boot.
	var bins [][]byte
	for _, r := range vm.Runs {
		b, err := os.ReadFile(r.Binary)
		if err != nil {
			return err
		}
		bins = append(bins, b)
	}
	libs := map[string]bool{}
	for _, t := range tools {
		named := false
		for _, b := range bins {
			if bytes.Contains(b, []byte(t)) {
				named = true
				break
			}
		}
		if !named {
			log.Debug("no test binary names the tool; left out of the guest", kernels.LogTool, t)
			continue
		}
		p, err := exec.LookPath(t)
		if err != nil {
			log.Debug("tool not on the host; left out of the guest", kernels.LogTool, t)
			continue
		}
		c.HostFile("usr/sbin/"+t, p, 0o755)
		dyn, err := sharedLibs(p)
		if err != nil {
			return err
		}
		for _, l := range dyn {
			libs[l] = true
		}
	}
	if _, err := os.Stat("/etc/iproute2"); err == nil {
		c.HostTree("/etc/iproute2", "/etc/iproute2", nil)
	}
	// tcpdump drops privileges to its own user; nobody for the rest.
	c.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/tmp:/bin/sh\ntcpdump:x:100:101::/nonexistent:/bin/false\nnobody:x:65534:65534::/nonexistent:/bin/false\n"))
	c.File("etc/group", 0o644, []byte("root:x:0:\ntcpdump:x:101:\nnogroup:x:65534:\n"))
	c.File("etc/hosts", 0o644, []byte("127.0.0.1 localhost\n::1 localhost\n"))
	for _, m := range mods {
		c.File("lib/modules/"+m.Name+".ko", 0o644, m.ELF)
	}
	for i, r := range vm.Runs {
		c.HostFile(fmt.Sprintf("tests/%d.test", i), r.Binary, 0o755)
		if r.Dir != "" {
			c.Dir(r.Dir)
		}
		dyn, err := sharedLibs(r.Binary)
		if err != nil {
			return err
		}
		for _, l := range dyn {
			libs[l] = true
		}
	}
	for l := range libs {
		c.HostFile(l, l, 0o755)
	}
	for _, d := range vm.Data {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			c.HostTree(d, d, func(rel string) bool { return filepath.Base(rel) == ".git" })
		}
	}
	c.File("init", 0o755, []byte(vm.initScript(mods)))
	if err := c.Close(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

func busyboxApplets(bb string) []string {
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return []string{"sh"}
	}
	return strings.Fields(string(out))
}

func requireStatic(path string) error {
	libs, err := sharedLibs(path)
	if err != nil {
		return err
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s is dynamically linked; install busybox-static", path)
	}
	return nil
}

// sharedLibs lists the shared objects (and loader) a dynamic binary needs,
// through ldd; nil for a static binary. Test binaries built with
// CGO_ENABLED=0 are static; a cgo build still runs, with its libraries
// copied in.
func sharedLibs(bin string) ([]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil, nil // a script
		}
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	defer f.Close()
	dynamic := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			dynamic = true
		}
	}
	if !dynamic {
		return nil, nil
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w (build it with CGO_ENABLED=0)", bin, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
				if real, err := filepath.EvalSymlinks(f); err == nil && real != f {
					libs = append(libs, real)
				}
			}
		}
	}
	return libs, nil
}

// shellQuote quotes s for the guest's busybox sh.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./,:+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
