package pin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestDetachRemovesOnlyOwnedPins (issue 10, finding 2): Detach removes the
// names the shield pins and leaves anything else in the directory, saying
// so.
func TestDetachRemovesOnlyOwnedPins(t *testing.T) {
	testutil.Root(t)
	root := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-owned-%d", os.Getpid()))
	if err := pinfs.EnsureBPFFS(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	dir, err := PinDir(root, "gone0")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{bpf.ShieldMapCounters, "victim"} {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	err = Detach(root, "gone0")
	if err == nil || !strings.Contains(err.Error(), "victim") {
		t.Errorf("Detach(dir with a foreign pin) = %v, want an error naming victim", err)
	}
	if _, err := os.Stat(filepath.Join(dir, bpf.ShieldMapCounters)); !os.IsNotExist(err) {
		t.Errorf("the shield's own pin counters is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "victim")); err != nil {
		t.Errorf("Detach removed a pin that is not the shield's: %v", err)
	}
}

// TestDetachRefusesNonBPFFS (issue 10, finding 2): an ordinary directory is
// refused before anything is looked at.
func TestDetachRefusesNonBPFFS(t *testing.T) {
	root := t.TempDir()
	dir, err := PinDir(root, "victim")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, bpf.ShieldMapCounters)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Detach(root, "victim"); err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") {
		t.Errorf("Detach(non-bpffs root) = %v, want a refusal", err)
	}
	if _, err := os.Stat(f); err != nil {
		t.Errorf("Detach removed %s from a non-bpffs root: %v", f, err)
	}
}
