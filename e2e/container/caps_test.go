package container

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"xdpshield/e2e"
	"xdpshield/internal/testutil"
	"xdpshield/internal/topo"
	"xdpshield/shield"
)

// ModernCaps is the set for engines and kernels that know CAP_BPF (5.8+,
// Docker 23+ or any runtime that passes it through): enough to load and
// attach afresh; adopting pins after a restart still needs CAP_SYS_ADMIN.
var ModernCaps = []string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"}

// TestModernCapabilities proves the modern set without Docker (20.10 does
// not know CAP_BPF): `shield serve` runs on a veth in a namespace of its
// own under setpriv with a bounding set of exactly the listed capabilities.
// The set serves on a fresh interface; without any one of them serve exits
// non-zero naming it, and with the check off the kernel refuses too; a
// restart that adopts the pins needs CAP_SYS_ADMIN, and says so.
func TestModernCapabilities(t *testing.T) {
	if testutil.InVM() {
		t.Skip("runs on the host only: the VM matrix's initramfs has no Docker engine, setpriv or go toolchain")
	}
	testutil.Root(t)
	testutil.Kernel(t, 5, 8, "CAP_BPF")
	for _, tool := range []string{"setpriv", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, tool+" (util-linux) is missing")
		}
	}
	bin := buildStatic(t)
	ns, err := topo.New("caps")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := topo.Veth(ns, e2e.EdgeDev, ns, "peer0"); err != nil {
		t.Fatal(err)
	}
	RemoveStalePinRoots()
	pinRoot := filepath.Join("/sys/fs/bpf", fmt.Sprintf("%s%d", CapsPinPrefix, os.Getpid()))
	if err := shield.EnsureBPFFS(pinRoot); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(pinRoot)
	detach := func() {
		t.Helper()
		dir := ""
		ns.Do(func() error { dir, _ = shield.PinDir(pinRoot, e2e.EdgeDev); return nil })
		if _, err := os.Stat(dir); err != nil {
			return
		}
		if err := ns.Do(func() error { return shield.Detach(pinRoot, e2e.EdgeDev) }); err != nil {
			t.Fatalf("detach: %v", err)
		}
	}
	defer detach()

	// serve runs serve with exactly caps; it returns whether it served
	// (it is then stopped, leaving its pins), its log, or its exit error.
	serve := func(caps []string, checkOff bool) (serving bool, log string, exit error) {
		t.Helper()
		set := "-all"
		for _, c := range caps {
			set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
		}
		cmd := exec.Command("nsenter", "--net=/run/netns/"+ns.Name, "setpriv", "--bounding-set", set, "--inh-caps", set,
			bin, "serve", "-iface", e2e.EdgeDev, "-pin-root", pinRoot)
		cmd.Env = os.Environ()
		if checkOff {
			cmd.Env = append(cmd.Env, "SHIELD_NO_CAP_CHECK=1")
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "msg=serving") {
				serving = true
				cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		err = cmd.Wait()
		if serving {
			err = nil
		}
		return serving, b.String(), err
	}
	if ok, log, err := serve(ModernCaps, false); !ok {
		t.Fatalf("with %v: not serving (%v); log:\n%s", ModernCaps, err, log)
	}
	t.Logf("with %v: serves on a fresh interface", ModernCaps)
	// Its pins are there now: a restart adopts them.
	for _, checkOff := range []bool{false, true} {
		ok, log, err := serve(ModernCaps, checkOff)
		if ok || err == nil || (!checkOff && !strings.Contains(log, "CAP_SYS_ADMIN")) {
			t.Errorf("restart with %v (check off: %v): serving %v, exit %v; want a refusal naming CAP_SYS_ADMIN; log:\n%s", ModernCaps, checkOff, ok, err, log)
		} else {
			t.Logf("restart with %v (check off: %v): %v: %s", ModernCaps, checkOff, err, lastLine(log))
		}
	}
	if ok, log, err := serve(append(slices.Clone(ModernCaps), "CAP_SYS_ADMIN"), false); !ok || !strings.Contains(log, "adopted pinned shield") {
		t.Errorf("restart with CAP_SYS_ADMIN too: serving %v (%v), want the pins adopted; log:\n%s", ok, err, log)
	}
	detach()
	for _, miss := range ModernCaps {
		rest := slices.DeleteFunc(slices.Clone(ModernCaps), func(c string) bool { return c == miss })
		for _, checkOff := range []bool{false, true} {
			ok, log, err := serve(rest, checkOff)
			if ok {
				detach()
			}
			if ok || err == nil || (!checkOff && !strings.Contains(log, miss)) {
				t.Errorf("without %s (check off: %v): serving %v, exit %v; want a non-zero exit (naming it when checked); log:\n%s", miss, checkOff, ok, err, log)
			} else {
				t.Logf("without %s (check off: %v): %v: %s", miss, checkOff, err, lastLine(log))
			}
		}
	}
}
