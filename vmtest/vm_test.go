package vmtest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/vmtest/kernels"
)

func TestCPIO(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		testutil.SkipOrFail(t, "cpio not installed (ci/deps.sh installs it)")
	}
	var buf bytes.Buffer
	c := newCPIO(&buf)
	c.File("bin/x", 0o755, []byte("abc"))
	c.Symlink("bin/sh", "busybox")
	c.CharDev("dev/console", 5, 1)
	c.File("init", 0o755, []byte("#!/bin/sh\n"))
	require.NoError(t, c.Close())
	cmd := exec.Command("cpio", "-t", "-v")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "cpio -t\n%s", out)
	for _, want := range []string{"bin\n", "bin/x\n", "bin/sh -> busybox", "dev/console", "init\n"} {
		assert.Contains(t, string(out), want, "cpio -tv output lacks %q", want)
	}
}

func TestShellQuote(t *testing.T) {
	tests := map[string]string{
		"-test.v":           "-test.v",
		"-test.run=^TestA$": `'-test.run=^TestA$'`,
		"it's":              `'it'\''s'`,
		"":                  "''",
	}
	for in, want := range tests {
		assert.Equal(t, want, shellQuote(in), "shellQuote(%q)", in)
	}
}

func TestInitScript(t *testing.T) {
	vm := &VM{
		Kernel: &kernels.Kernel{Pin: &kernels.Pin{Name: "6.1", Release: "6.1.0-50-cloud-amd64"}},
		Runs:   []Run{{Name: "github.com/xdpshield/xdpshield/sim", Dir: "/work/main/sim", Args: []string{"-test.run=^TestA$", "-test.v"}}},
		Env:    []string{"SHIELD_X=a b"},
		accel:  "tcg",
	}
	s := vm.initScript([]kernels.Module{{Name: "veth"}})
	for _, want := range []string{
		`[ "$(uname -r)" = 6.1.0-50-cloud-amd64 ]`,
		"insmod /lib/modules/veth.ko",
		"export SHIELD_REQUIRE_PRIV=1",
		"export SHIELD_X='a b'",
		"export VMTEST=1 VMTEST_KERNEL=6.1 VMTEST_ACCEL=tcg",
		"(cd /work/main/sim && exec /tests/0.test '-test.run=^TestA$' -test.v)",
		"mount -t bpf bpffs /sys/fs/bpf",
		"mount -t cgroup2 cgroup2 /sys/fs/cgroup",
		"mount -t debugfs debugfs /sys/kernel/debug",
		"say EXIT $rc",
		"say PHASE init $up0", "phase mounts", "phase modules", "phase tests",
	} {
		assert.Contains(t, s, want, "init script lacks %q", want)
	}
}

// TestLockVMSlots: with two slots two VMs hold the lock at once, a third
// waits until one ends; with one slot a second waits.
func TestLockVMSlots(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		slots, free int
	}{
		{1, 1},
		{2, 2},
	} {
		var unlocks []func()
		for range tc.free {
			u, err := LockSlot(context.Background(), dir, tc.slots, log)
			require.NoError(t, err, "LockSlot(%d slots)", tc.slots)
			unlocks = append(unlocks, u)
		}
		got := make(chan func(), 1)
		go func() {
			u, err := LockSlot(context.Background(), dir, tc.slots, log)
			if !assert.NoError(t, err, "LockSlot(%d slots), waiting", tc.slots) {
				u = func() {}
			}
			got <- u
		}()
		select {
		case u := <-got:
			u()
			require.Fail(t, "took a slot while all were held", "LockSlot(%d slots) took a slot while %d VMs held them all", tc.slots, tc.free)
		case <-time.After(600 * time.Millisecond):
		}
		unlocks[0]()
		select {
		case u := <-got:
			u()
		case <-time.After(5 * time.Second):
			require.Fail(t, "still waiting", "LockSlot(%d slots) still waiting 5 s after a slot was freed", tc.slots)
		}
		for _, u := range unlocks[1:] {
			u()
		}
	}
	// Every slot held: the wait ends with its context.
	u, err := LockSlot(context.Background(), dir, 1, log)
	require.NoError(t, err)
	defer u()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = LockSlot(ctx, dir, 1, log)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "LockSlot(all held)")
}

// TestPrefixWriter: whole lines, each prefixed, a line split over writes
// joined.
func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	w := PrefixWriter(&b, "[k] ")
	for _, s := range []string{"one\ntw", "o\n", "", "three", "\nfour\n"} {
		n, err := w.Write([]byte(s))
		require.NoError(t, err, "Write(%q)", s)
		require.Equal(t, len(s), n, "Write(%q)", s)
	}
	assert.Equal(t, "[k] one\n[k] two\n[k] three\n[k] four\n", b.String(), "PrefixWriter output")
}
