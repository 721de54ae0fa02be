package topo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"xdpshield/internal/testutil"
)

func TestPairPingAndCleanup(t *testing.T) {
	testutil.Root(t)
	a, err := New("ta")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New("tb")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := Veth(a, "va", b, "vb"); err != nil {
		t.Fatal(err)
	}
	if err := a.AddAddr("va", "198.18.0.1/24"); err != nil {
		t.Fatal(err)
	}
	if err := b.AddAddr("vb", "198.18.0.2/24"); err != nil {
		t.Fatal(err)
	}
	out, err := a.Command("ping", "-c1", "-W2", "198.18.0.2").CombinedOutput()
	if err != nil {
		t.Fatalf("ping across the pair: %v\n%s", err, out)
	}
	// The root namespace never sees the links.
	root, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := os.Stat("/sys/class/net/va"); err == nil {
		t.Fatal("veth va appeared in the root namespace")
	}

	names := []string{a.Name, b.Name}
	a.Close()
	b.Close()
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); err == nil {
			t.Errorf("namespace %s still exists after Close", n)
		}
		if !strings.HasPrefix(n, Prefix) {
			t.Errorf("namespace %s lacks the prefix %s", n, Prefix)
		}
	}
}

func TestCleanupStaleRemovesDeadPids(t *testing.T) {
	testutil.Root(t)
	// A pid that cannot be alive: beyond pid_max's ceiling.
	const dead = "xdps-stale-4194305"
	if out, err := exec.Command("ip", "netns", "add", dead).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	removed, err := CleanupStale()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range removed {
		found = found || r == dead
	}
	if !found {
		netns.DeleteNamed(dead)
		t.Fatalf("CleanupStale() removed %v, want it to include %s", removed, dead)
	}
}

// TestNamespacesSurviveIPNetnsAdd: an `ip netns add` run by someone else
// while our namespaces exist must not keep them from being removed. On a
// machine where /run/netns was never a mount point (a fresh boot; CI
// reproduces it in a private mount namespace), iproute2 then bind-mounts the
// directory over itself and hides nsfs mounts made without preparing it.
func TestNamespacesSurviveIPNetnsAdd(t *testing.T) {
	testutil.Root(t)
	a, err := New("ipr")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	other := fmt.Sprintf("%sipr-other-%d", Prefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", other).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", other, err, out)
	}
	defer exec.Command("ip", "netns", "del", other).Run()
	b, err := New("ipr-after")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, n := range []*NS{a, b} {
		if err := n.Close(); err != nil {
			t.Errorf("Close(%s) = %v, want nil", n.Name, err)
		}
		if _, err := os.Stat(filepath.Join(netnsDir, n.Name)); err == nil {
			t.Errorf("namespace %s still exists after Close", n.Name)
		}
	}
	if out, err := exec.Command("ip", "netns", "del", other).CombinedOutput(); err != nil {
		t.Errorf("ip netns del %s: %v\n%s", other, err, out)
	}
}

// StaleDirs returns only names of this prefix whose pid is gone. Run as
// nobody (make test-unpriv), pid 1 answers kill(1, 0) with EPERM: it must
// still count as alive, or an unprivileged caller would take a live run's
// state for a leftover.
func TestStaleDirs(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.Process.Pid
	dir := t.TempDir()
	for _, name := range []string{
		"p-1", fmt.Sprintf("p-%d", os.Getpid()), fmt.Sprintf("p-%d", deadPID),
		"p-x", "p-0", fmt.Sprintf("q-%d", deadPID),
	} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if !Alive(1) {
		t.Fatalf("Alive(1) = false as uid %d, want true (EPERM is a live process)", os.Getuid())
	}
	got, want := StaleDirs(dir, "p-"), []string{filepath.Join(dir, fmt.Sprintf("p-%d", deadPID))}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("StaleDirs = %q, want %q", got, want)
	}
}
