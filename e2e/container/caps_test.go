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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield/pin"
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
	require.NoError(t, err)
	defer ns.Close()
	require.NoError(t, topo.Veth(ns, storm.EdgeDev, ns, "peer0"))
	RemoveStalePinRoots()
	pinRoot := filepath.Join("/sys/fs/bpf", fmt.Sprintf("%s%d", CapsPinPrefix, os.Getpid()))
	require.NoError(t, pinfs.EnsureBPFFS(pinRoot))
	defer os.RemoveAll(pinRoot)
	detach := func() {
		t.Helper()
		dir := ""
		ns.Do(func() error { dir, _ = pin.PinDir(pinRoot, storm.EdgeDev); return nil })
		if _, err := os.Stat(dir); err != nil {
			return
		}
		require.NoError(t, ns.Do(func() error { return pin.Detach(pinRoot, storm.EdgeDev) }), "detach")
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
			bin, "serve", "-iface", storm.EdgeDev, "-pin-root", pinRoot)
		cmd.Env = os.Environ()
		if checkOff {
			cmd.Env = append(cmd.Env, "SHIELD_NO_CAP_CHECK=1")
		}
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
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
	ok, log, err := serve(ModernCaps, false)
	require.True(t, ok, "with %v: not serving (%v); log:\n%s", ModernCaps, err, log)
	t.Logf("with %v: serves on a fresh interface", ModernCaps)
	// Its pins are there now: a restart adopts them.
	for _, checkOff := range []bool{false, true} {
		ok, log, err := serve(ModernCaps, checkOff)
		refused := !ok && err != nil && (checkOff || strings.Contains(log, "CAP_SYS_ADMIN"))
		if assert.True(t, refused, "restart with %v (check off: %v): serving %v, exit %v; want a refusal naming CAP_SYS_ADMIN; log:\n%s", ModernCaps, checkOff, ok, err, log) {
			t.Logf("restart with %v (check off: %v): %v: %s", ModernCaps, checkOff, err, lastLine(log))
		}
	}
	ok, log, err = serve(append(slices.Clone(ModernCaps), "CAP_SYS_ADMIN"), false)
	assert.True(t, ok && strings.Contains(log, "adopted pinned shield"), "restart with CAP_SYS_ADMIN too: serving %v (%v), want the pins adopted; log:\n%s", ok, err, log)
	detach()
	for _, miss := range ModernCaps {
		rest := slices.DeleteFunc(slices.Clone(ModernCaps), func(c string) bool { return c == miss })
		for _, checkOff := range []bool{false, true} {
			ok, log, err := serve(rest, checkOff)
			if ok {
				detach()
			}
			refused := !ok && err != nil && (checkOff || strings.Contains(log, miss))
			if assert.True(t, refused, "without %s (check off: %v): serving %v, exit %v; want a non-zero exit (naming it when checked); log:\n%s", miss, checkOff, ok, err, log) {
				t.Logf("without %s (check off: %v): %v: %s", miss, checkOff, err, lastLine(log))
			}
		}
	}
}
