package testutil

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/features"
)

// TestFeatureSkips: a test needing a feature the kernel refuses skips, even
// under SHIELD_REQUIRE_PRIV=1, naming the feature and the errno (the kernel
// refusing is simulated with SHIELD_FEATURES_OFF).
func TestFeatureSkips(t *testing.T) {
	t.Setenv("SHIELD_REQUIRE_PRIV", "1")
	t.Setenv(features.Env, features.MapIter.Name)
	// No other test of this package probes MapIter: its one probe is this,
	// with the variable set.
	f := features.MapIter
	var skipped bool
	var msg string
	ok := t.Run("needs-iter", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		err := f.Check()
		msg = err.Error()
		Feature(t, f)
		assert.Fail(t, "Feature did not skip")
	})
	assert.True(t, ok, "the subtest failed instead of skipping")
	assert.True(t, skipped, "the subtest did not skip")
	assert.True(t, strings.HasPrefix(msg, "kernel feature map_elem_iter unavailable (EPERM)"), "skip message %q", msg)
}

// TestRootLiftsMemlock: after Root, a test may create a map itself with the
// memlock limit at zero. Before Root lifted it, 5.10 refused such a map with
// EPERM whenever root's locked_vm was already near the limit (TestDetach-
// RemovesOnlyOwnedPins in CI, right after the l7 package's planes). Newer
// kernels charge maps to the memory cgroup, so this can only fail before
// 5.11; it is in the VM matrix for 5.10.
func TestRootLiftsMemlock(t *testing.T) {
	Root(t)
	var old unix.Rlimit
	require.NoError(t, unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &old))
	require.NoError(t, unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 0, Max: old.Max}, nil))
	t.Cleanup(func() { _ = unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &old, nil) })
	Root(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	require.NoError(t, err, "creating a map after Root with RLIMIT_MEMLOCK at 0")
	m.Close()
}
