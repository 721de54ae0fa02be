package pin

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	require.NoError(t, pinfs.EnsureBPFFS(root))
	t.Cleanup(func() { os.RemoveAll(root) })
	dir, err := PinDir(root, "gone0")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	for _, name := range []string{bpf.ShieldMapCounters, "victim"} {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		require.NoError(t, err)
		require.NoError(t, m.Pin(filepath.Join(dir, name)))
		m.Close()
	}
	err = Detach(root, "gone0")
	assert.ErrorContains(t, err, "victim", "Detach(dir with a foreign pin) = %v, want an error naming victim", err)
	_, err = os.Stat(filepath.Join(dir, bpf.ShieldMapCounters))
	assert.True(t, os.IsNotExist(err), "the shield's own pin counters is still there: %v", err)
	_, err = os.Stat(filepath.Join(dir, "victim"))
	assert.NoError(t, err, "Detach removed a pin that is not the shield's")
}

// TestDetachRefusesNonBPFFS (issue 10, finding 2): an ordinary directory is
// refused before anything is looked at.
func TestDetachRefusesNonBPFFS(t *testing.T) {
	root := t.TempDir()
	dir, err := PinDir(root, "victim")
	require.NoError(t, err)
	f := filepath.Join(dir, bpf.ShieldMapCounters)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(f, nil, 0o600))
	err = Detach(root, "victim")
	assert.ErrorContains(t, err, "not on a bpf filesystem", "Detach(non-bpffs root) = %v, want a refusal", err)
	_, err = os.Stat(f)
	assert.NoError(t, err, "Detach removed %s from a non-bpffs root", f)
}
