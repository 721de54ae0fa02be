package topo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

func TestPairPingAndCleanup(t *testing.T) {
	testutil.Root(t)
	a, err := New("ta")
	require.NoError(t, err)
	defer a.Close()
	b, err := New("tb")
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, Veth(a, "va", b, "vb"))
	require.NoError(t, a.AddAddr("va", "198.18.0.1/24"))
	require.NoError(t, b.AddAddr("vb", "198.18.0.2/24"))
	out, err := a.Command("ping", "-c1", "-W2", "198.18.0.2").CombinedOutput()
	require.NoError(t, err, "ping across the pair:\n%s", out)
	// The root namespace never sees the links.
	root, err := netns.Get()
	require.NoError(t, err)
	defer root.Close()
	require.NoFileExists(t, "/sys/class/net/va", "veth va appeared in the root namespace")

	names := []string{a.Name, b.Name}
	a.Close()
	b.Close()
	for _, n := range names {
		assert.NoFileExists(t, "/run/netns/"+n, "namespace %s still exists after Close", n)
		assert.True(t, strings.HasPrefix(n, Prefix), "namespace %s lacks the prefix %s", n, Prefix)
	}
}

func TestCleanupStaleRemovesDeadPids(t *testing.T) {
	testutil.Root(t)
	// A pid that cannot be alive: beyond pid_max's ceiling.
	const dead = "xdps-stale-4194305"
	out, err := exec.Command("ip", "netns", "add", dead).CombinedOutput()
	require.NoError(t, err, "ip netns add:\n%s", out)
	removed, err := CleanupStale()
	require.NoError(t, err)
	found := false
	for _, r := range removed {
		found = found || r == dead
	}
	if !found {
		netns.DeleteNamed(dead)
	}
	require.True(t, found, "CleanupStale() removed %v, want it to include %s", removed, dead)
}

// TestNamespacesSurviveIPNetnsAdd: an `ip netns add` run by someone else
// while our namespaces exist must not keep them from being removed. On a
// machine where /run/netns was never a mount point (a fresh boot; CI
// reproduces it in a private mount namespace), iproute2 then bind-mounts the
// directory over itself and hides nsfs mounts made without preparing it.
func TestNamespacesSurviveIPNetnsAdd(t *testing.T) {
	testutil.Root(t)
	a, err := New("ipr")
	require.NoError(t, err)
	defer a.Close()
	other := fmt.Sprintf("%sipr-other-%d", Prefix, os.Getpid())
	out, err := exec.Command("ip", "netns", "add", other).CombinedOutput()
	require.NoError(t, err, "ip netns add %s:\n%s", other, out)
	defer exec.Command("ip", "netns", "del", other).Run()
	b, err := New("ipr-after")
	require.NoError(t, err)
	defer b.Close()
	for _, n := range []*NS{a, b} {
		assert.NoError(t, n.Close(), "Close(%s)", n.Name)
		assert.NoFileExists(t, filepath.Join(netnsDir, n.Name), "namespace %s still exists after Close", n.Name)
	}
	out, err = exec.Command("ip", "netns", "del", other).CombinedOutput()
	assert.NoError(t, err, "ip netns del %s:\n%s", other, out)
}

// StaleDirs returns only names of this prefix whose pid is gone. Run as
// nobody (make test-unpriv), pid 1 answers kill(1, 0) with EPERM: it must
// still count as alive, or an unprivileged caller would take a live run's
// state for a leftover.
func TestStaleDirs(t *testing.T) {
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	deadPID := dead.Process.Pid
	dir := t.TempDir()
	for _, name := range []string{
		"p-1", fmt.Sprintf("p-%d", os.Getpid()), fmt.Sprintf("p-%d", deadPID),
		"p-x", "p-0", fmt.Sprintf("q-%d", deadPID),
	} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, name), 0o700))
	}
	require.True(t, Alive(1), "Alive(1) = false as uid %d, want true (EPERM is a live process)", os.Getuid())
	got, want := StaleDirs(dir, "p-"), []string{filepath.Join(dir, fmt.Sprintf("p-%d", deadPID))}
	assert.Equal(t, strings.Join(want, " "), strings.Join(got, " "), "StaleDirs = %q, want %q", got, want)

}
