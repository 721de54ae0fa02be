package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// systemdDriver runs inside the booted container as the only unit asked
// for: it starts shield.service (Type=notify: systemctl returns once
// serve said READY=1), outlives two watchdog periods, reloads a file that
// does not validate and then a good one, and writes what it saw to /out.
const systemdDriver = `#!/bin/sh
exec >/out/driver.log 2>&1
set -x
show() { systemctl show -P "$2" shield.service >"/out/$1.$2"; }
systemctl start shield.service; echo $? >/out/start.rc
show start MainPID; show start ActiveState; show start SubState; show start StatusText
shield limits get -json >/out/limits0.json
sleep 3 # WatchdogSec=1s in the test's drop-in
show alive MainPID; show alive NRestarts; show alive ActiveState
cp /cfg/bad.toml /etc/xdpshield/shield.toml
systemctl reload shield.service; echo $? >/out/reload-bad.rc
sleep 1
shield limits get -json >/out/limits-bad.json
show bad MainPID; show bad ActiveState; show bad StatusText
cp /cfg/good.toml /etc/xdpshield/shield.toml
systemctl reload shield.service; echo $? >/out/reload-good.rc
sleep 1
shield limits get -json >/out/limits-good.json
shield deny list -json >/out/deny-good.json
show good MainPID; show good ActiveState; show good NRestarts
systemd-analyze security shield.service >/out/security.txt
journalctl -u shield.service --no-pager -o cat >/out/journal.txt
systemctl poweroff
`

const systemdConfig = `iface = "sda"
pin_root = "/sys/fs/bpf/xdpshield"
[limits]
rate = %d
burst = 4000
[lists]
deny = [%s]
`

// TestSystemdUnit boots systemd (systemd-nspawn --boot on this machine's
// own /usr, a tmpfs for the rest) with dist/systemd/shield.service and the
// binary built from this tree: the unit starts with every hardening
// option on, serve tells systemd READY=1 and keeps the watchdog fed, and
// SIGHUP applies a good configuration and refuses a bad one without
// restarting anything.
func TestSystemdUnit(t *testing.T) {
	testutil.Root(t)
	if testing.Short() {
		t.Skip("boots systemd in a container (-short)")
	}
	nspawn, err := exec.LookPath("systemd-nspawn")
	if err != nil {
		testutil.SkipOrFail(t, "systemd-nspawn is missing (Debian package systemd-container; ci/deps.sh installs it)")
	}
	if _, err := os.Stat("/usr/lib/systemd/systemd"); err != nil {
		testutil.SkipOrFail(t, "no systemd to boot: /usr/lib/systemd/systemd is missing (Debian package systemd)")
	}
	// nspawn makes /run/systemd/nspawn/propagate/MACHINE: remove what it
	// leaves (empty directories) when it was not there before.
	if _, err := os.Stat("/run/systemd/nspawn"); os.IsNotExist(err) {
		t.Cleanup(func() {
			os.Remove("/run/systemd/nspawn/propagate")
			os.Remove("/run/systemd/nspawn")
		})
	}
	dir := t.TempDir()
	// The unit runs /usr/local/bin/shield: the directory is the test's.
	binDir := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(binDir, 0o755))
	bin := filepath.Join(binDir, "shield")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)

	ns, err := topo.New("sd")
	require.NoError(t, err)
	t.Cleanup(func() { ns.Close() })
	require.NoError(t, topo.Veth(ns, "sda", ns, "sdb"))
	// A bpffs of the test's own, as the container's /sys/fs/bpf.
	bpffs := filepath.Join(dir, "bpffs")
	require.NoError(t, os.Mkdir(bpffs, 0o700))
	require.NoError(t, syscall.Mount("bpf", bpffs, "bpf", 0, "mode=0700"))
	t.Cleanup(func() { syscall.Unmount(bpffs, syscall.MNT_DETACH) })

	cfgDir, etc, outDir := filepath.Join(dir, "cfg"), filepath.Join(dir, "etc"), filepath.Join(dir, "out")
	for _, d := range []string{cfgDir, etc, outDir} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	write := func(path, s string) {
		t.Helper()
		require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
	}
	write(filepath.Join(etc, "shield.toml"), fmt.Sprintf(systemdConfig, 1000, `"198.18.7.0/24"`))
	write(filepath.Join(cfgDir, "bad.toml"), fmt.Sprintf(systemdConfig, 5000, `"198.18.8.0/24", "not-a-prefix"`))
	write(filepath.Join(cfgDir, "good.toml"), fmt.Sprintf(systemdConfig, 3000, `"198.18.9.0/24"`))
	write(filepath.Join(cfgDir, "drive.sh"), systemdDriver)
	require.NoError(t, os.Chmod(filepath.Join(cfgDir, "drive.sh"), 0o755))
	write(filepath.Join(cfgDir, "drive.service"), "[Service]\nType=oneshot\nExecStart=/cfg/drive.sh\n")
	write(filepath.Join(cfgDir, "watchdog.conf"), "[Service]\nWatchdogSec=1s\n")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nspawn, "--quiet", "--register=no", "--keep-unit", "--directory=/", "--volatile=yes",
		"--machine=shield-test", "--system-call-filter=bpf", "--network-namespace-path=/run/netns/"+ns.Name,
		"--bind="+bpffs+":/sys/fs/bpf", "--bind="+outDir+":/out", "--bind-ro="+cfgDir+":/cfg", "--bind="+etc+":/etc/xdpshield",
		"--bind-ro="+binDir+":/usr/local/bin",
		"--bind-ro=../../dist/systemd/shield.service:/etc/systemd/system/shield.service",
		"--bind-ro="+filepath.Join(cfgDir, "watchdog.conf")+":/etc/systemd/system/shield.service.d/test.conf",
		"--bind-ro="+filepath.Join(cfgDir, "drive.service")+":/etc/systemd/system/drive.service",
		"--boot", "systemd.unit=drive.service", "systemd.firstboot=no")
	cmd.Stdin = nil
	console, err := cmd.CombinedOutput()
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(outDir, name))
		return strings.TrimSpace(string(b))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver:\n%s\njournal:\n%s\nconsole:\n%s", read("driver.log"), read("journal.txt"), console)
		}
	})
	require.NoError(t, ctx.Err(), "the container did not power off within 50 s")
	_ = err // nspawn's own exit status after poweroff says nothing of the unit

	require.Equal(t, "0", read("start.rc"), "systemctl start shield.service")
	assert.Equal(t, "active", read("start.ActiveState"))
	assert.Equal(t, "running", read("start.SubState"))
	assert.Equal(t, "protecting sda", read("start.StatusText"), "STATUS= sent with READY=1")
	pid := read("start.MainPID")
	require.NotEqual(t, "0", pid)
	assert.Equal(t, pid, read("alive.MainPID"), "the watchdog (1 s) restarted serve")
	assert.Equal(t, "0", read("alive.NRestarts"))
	rate := func(name string) uint64 {
		var l struct {
			Rate uint64 `json:"rate"`
		}
		require.NoError(t, json.Unmarshal([]byte(read(name)), &l), "%s: %q", name, read(name))
		return l.Rate
	}
	assert.Equal(t, uint64(1000), rate("limits0.json"))
	assert.Equal(t, uint64(1000), rate("limits-bad.json"), "limits after reloading a bad file")
	assert.Equal(t, pid, read("bad.MainPID"), "a bad reload restarted serve")
	assert.Equal(t, "active", read("bad.ActiveState"))
	assert.Contains(t, read("journal.txt"), "reload refused; nothing was changed")
	assert.Equal(t, uint64(3000), rate("limits-good.json"), "limits after reloading a good file")
	assert.Contains(t, read("deny-good.json"), "198.18.9.0/24")
	assert.NotContains(t, read("deny-good.json"), "198.18.7.0/24")
	assert.Equal(t, pid, read("good.MainPID"), "a reload restarted serve")
	assert.Equal(t, "0", read("good.NRestarts"))
	t.Logf("systemd-analyze security: %s", lastLine(read("security.txt")))
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
