package vmtest

import (
	"github.com/xdpshield/xdpshield/vmtest/kernels"

	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xdpshield/xdpshield/internal/testutil"
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
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-t", "-v")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v\n%s", err, out)
	}
	for _, want := range []string{"bin\n", "bin/x\n", "bin/sh -> busybox", "dev/console", "init\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("cpio -tv output lacks %q:\n%s", want, out)
		}
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
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
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
		if !strings.Contains(s, want) {
			t.Errorf("init script lacks %q:\n%s", want, s)
		}
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
			if err != nil {
				t.Fatalf("LockSlot(%d slots) = %v", tc.slots, err)
			}
			unlocks = append(unlocks, u)
		}
		got := make(chan func(), 1)
		go func() {
			u, err := LockSlot(context.Background(), dir, tc.slots, log)
			if err != nil {
				t.Errorf("LockSlot(%d slots), waiting = %v", tc.slots, err)
				u = func() {}
			}
			got <- u
		}()
		select {
		case u := <-got:
			u()
			t.Fatalf("LockSlot(%d slots) took a slot while %d VMs held them all", tc.slots, tc.free)
		case <-time.After(600 * time.Millisecond):
		}
		unlocks[0]()
		select {
		case u := <-got:
			u()
		case <-time.After(5 * time.Second):
			t.Fatalf("LockSlot(%d slots) still waiting 5 s after a slot was freed", tc.slots)
		}
		for _, u := range unlocks[1:] {
			u()
		}
	}
	// Every slot held: the wait ends with its context.
	u, err := LockSlot(context.Background(), dir, 1, log)
	if err != nil {
		t.Fatal(err)
	}
	defer u()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := LockSlot(ctx, dir, 1, log); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("LockSlot(all held) = %v, want the context's deadline", err)
	}
}

// TestPrefixWriter: whole lines, each prefixed, a line split over writes
// joined.
func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	w := PrefixWriter(&b, "[k] ")
	for _, s := range []string{"one\ntw", "o\n", "", "three", "\nfour\n"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v, want %d, nil", s, n, err, len(s))
		}
	}
	if got, want := b.String(), "[k] one\n[k] two\n[k] three\n[k] four\n"; got != want {
		t.Errorf("PrefixWriter output = %q, want %q", got, want)
	}
}
