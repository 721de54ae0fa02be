package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/serve"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// Tests named after issue 23's findings 5, 6 and 9, each reproducing the
// report.

// TestCLIRefusesPlainHTTPBeyondLoopback: `shield deny add -api
// http://198.18.0.1:9470` sent the bearer token in clear to a host of the
// network. The CLI now refuses plain http:// beyond loopback and sends
// nothing.
func TestCLIRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	l := newLab(t, "plain")
	var ln net.Listener
	require.NoError(t, l.edge.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", "198.18.0.1:9470")
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	var got atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 4096)
			n, _ := c.Read(b)
			got.Add(int64(n))
			c.Close()
		}
	}()
	cmd, out := l.shieldCmd("deny", "add", "-api", "http://198.18.0.1:9470", "-token-file", l.tokenFile, "198.18.0.3/32")
	err := cmd.Run()
	require.Error(t, err, "deny add over plain http to 198.18.0.1 exited 0:\n%s", out)
	assert.Contains(t, out.String(), "not a loopback address")
	assert.Zero(t, got.Load(), "bytes the CLI sent to 198.18.0.1:9470 over plain http")
}

// TestReadableSecretsWarned: an L7 set_header value and RBAC header values
// are served to any local user by GET /v1/l7/policy when api.auth_reads is
// off, and serve said nothing. It now warns at start, naming the keys.
func TestReadableSecretsWarned(t *testing.T) {
	l := newLab(t, "secrets")
	l.l7Backend(t, "198.18.0.1:9001")
	conf := filepath.Join(t.TempDir(), "shield.toml")
	require.NoError(t, os.WriteFile(conf, []byte(`[l7]
listen = "198.18.0.1:80"
[[l7.route]]
name = "all"
path_prefix = "/"
backends = ["198.18.0.1:9001"]
[[l7.rbac]]
action = "deny"
header = "X-Role"
value = "guest"
[l7.set_header]
name = "Authorization"
value = "Bearer backend-secret"
`), 0o600))
	s := l.serve(t, "-config", conf)
	s.waitLog(t, "readable by any local user")
	s.waitLog(t, "l7.set_header.value")
	s.waitLog(t, "l7.rbac[0].value")
}

// envMkdir makes the test binary, run as nobody, make a directory (mode
// 0755) at its value.
const envMkdir = "SHIELD_TEST_MKDIR"

// bpffsAt mounts a bpffs of mode 1777 (as some hosts do) on a fresh
// directory anyone may reach, unmounted at cleanup.
func bpffsAt(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "shield-bpffs-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	m := filepath.Join(base, "bpf")
	require.NoError(t, os.Mkdir(m, 0o755))
	require.NoError(t, unix.Mount("bpf", m, "bpf", 0, "mode=1777"))
	t.Cleanup(func() { unix.Unmount(m, unix.MNT_DETACH) })
	return m
}

// TestPinRootOfAnotherUserRefused (finding 6): on a 1777 bpffs, nobody
// made the pin root first; serve used it, and nobody could move the
// shield's directory away. serve now refuses a root another user owns
// and attaches nothing.
func TestPinRootOfAnotherUserRefused(t *testing.T) {
	l := newLab(t, "pinown")
	m := bpffsAt(t)
	root := filepath.Join(m, "xdpshield")
	mk := testutil.NobodyCmd(t, envMkdir+"="+root)
	out, err := mk.CombinedOutput()
	require.NoError(t, err, "mkdir as nobody: %s", out)
	cmd, sOut := l.shieldCmd("serve", "-iface", "va", "-pin-root", root, "-token-file", l.tokenFile)
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		assert.Error(t, err)
		assert.Contains(t, sOut.String(), "belongs to uid 65534")
	case <-time.After(10 * time.Second):
		cmd.Process.Signal(os.Interrupt)
		<-done
		assert.Fail(t, "serve with a pin root made by nobody was still serving after 10 s:\n"+sOut.String())
	}
	ok, _ := xdpAttached(t, l)
	assert.False(t, ok, "XDP attached with a pin root of nobody's")
	l.edge.Do(func() error { return pin.Detach(root, "va") })
}

// TestDetachDoesNotFollowSymlink (finding 6): a symlink in the pin root
// (IFACE -> a plain directory) led `shield detach` to delete the
// directory's sources, config_map and counters files. It now refuses to
// follow it and removes nothing.
func TestDetachDoesNotFollowSymlink(t *testing.T) {
	l := newLab(t, "pinlink")
	dir := l.pinDir(t)
	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o700))
	victim := t.TempDir()
	names := []string{"sources", "config_map", "counters"}
	for _, n := range names {
		require.NoError(t, os.WriteFile(filepath.Join(victim, n), []byte("precious"), 0o600))
	}
	require.NoError(t, os.Symlink(victim, dir))
	cmd, out := l.shieldCmd("detach", "-iface", "va", "-pin-root", l.pinRoot)
	err := cmd.Run()
	assert.Error(t, err, "detach through a symlink exited 0:\n%s", out)
	for _, n := range names {
		_, err := os.Stat(filepath.Join(victim, n))
		assert.NoError(t, err, "%s in the symlink's target after detach:\n%s", n, out)
	}
	assert.True(t, strings.Contains(out.String(), "symlink"), "detach's refusal does not name the symlink:\n%s", out)
	os.Remove(dir)
}

// nsInode is the inode of ns's nsfs file: what pins were keyed by alone.
func nsInode(t *testing.T, ns *topo.NS) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat("/run/netns/"+ns.Name, &st))
	return st.Ino
}

// deadNamespaceLab serves in a lab, leaves allow 0.0.0.0/0 and rate 5 in
// its pins, stops the service and deletes the edge namespace; then it
// makes namespaces until one reuses the dead one's inode (the kernel
// hands the lowest free number out again as soon as the namespace is
// freed), with va in it, sharing the pin root. Another process may take
// the number first on a busy machine: the scenario is tried three times.
func deadNamespaceLab(t *testing.T, role string) *lab {
	t.Helper()
	for try := range 3 {
		if b := deadNamespaceTry(t, fmt.Sprintf("%s%d", role, try)); b != nil {
			return b
		}
	}
	require.Fail(t, "in three tries, no new namespace reused a dead one's inode")
	return nil
}

func deadNamespaceTry(t *testing.T, role string) *lab {
	t.Helper()
	a := newLab(t, role)
	s := a.serve(t)
	ctx := context.Background()
	_, err := a.client.Add(ctx, lists.AllowList, []string{"0.0.0.0/0"})
	require.NoError(t, err)
	lim := config.DefaultLimits()
	lim.Rate = 5
	lim.Burst = 5
	_, err = a.client.SetLimits(ctx, lim)
	require.NoError(t, err)
	s.stop(t)
	a.client.HTTP.CloseIdleConnections() // a socket holds its namespace
	ino := nsInode(t, a.edge)
	require.NoError(t, a.edge.Close())
	b := &lab{storm: a.storm, pinRoot: a.pinRoot, tokenFile: a.tokenFile}
	// Numbers freed earlier and below the dead one's are held until the
	// dead one's comes round.
	var held []*topo.NS
	defer func() {
		for _, ns := range held {
			ns.Close()
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; b.edge == nil && time.Now().Before(deadline); i++ {
		ns, err := topo.New(fmt.Sprintf("%s-b%d", role, i))
		require.NoError(t, err)
		switch got := nsInode(t, ns); {
		case got == ino:
			b.edge = ns
		case got < ino:
			held = append(held, ns)
		default: // the dead one not freed yet, or taken by another
			ns.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}
	if b.edge == nil {
		t.Logf("%s: no new namespace reused the dead one's inode %d within 15 s", role, ino)
		return nil
	}
	t.Cleanup(func() {
		b.edge.Do(func() error { return pin.Detach(b.pinRoot, "va", serve.LBPins...) })
		b.edge.Close()
	})
	require.NoError(t, topo.Veth(b.edge, "va", b.storm, "vb"))
	require.NoError(t, b.edge.AddAddr("va", "198.18.0.1/24"))
	b.client = clientIn(t, b.edge)
	return b
}

// TestNewNamespaceDoesNotAdoptDeadOnesPins (finding 5): namespace inode
// numbers are reused at once, and a fresh serve in a new namespace took
// the dead one's `allow 0.0.0.0/0` and `rate 5` ("attaching afresh").
// Pins are now named by the namespace's cookie too: the new namespace
// starts from its own configuration.
func TestNewNamespaceDoesNotAdoptDeadOnesPins(t *testing.T) {
	testutil.Kernel(t, 5, 14, "SO_NETNS_COOKIE")
	b := deadNamespaceLab(t, "deadns")
	s := b.serve(t)
	ctx := context.Background()
	lim, err := b.client.Limits(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1000), lim.Rate, "the new namespace's rate (the dead one's was 5)\n%s", s.out)
	allow, err := b.client.List(ctx, lists.AllowList)
	require.NoError(t, err)
	assert.Empty(t, allow.Prefixes, "the new namespace's allow list (the dead one's held 0.0.0.0/0)\n%s", s.out)
	assert.NotContains(t, s.out.String(), "adopted")
}

// TestDeadNamespacePinsRefusedWithoutCookie (finding 5, kernels before
// 5.14): without a namespace cookie the service cannot tell the dead
// namespace's pins from its own; it refuses them, attaching nothing,
// unless told -adopt-pins.
func TestDeadNamespacePinsRefusedWithoutCookie(t *testing.T) {
	t.Setenv("SHIELD_TEST_NO_NETNS_COOKIE", "1")
	b := deadNamespaceLab(t, "deadnc")
	out := b.serveRefused(t, "-adopt-pins", "va")
	ok, _ := xdpAttached(t, b)
	assert.False(t, ok, "XDP attached over a dead namespace's pins without a cookie:\n%s", out)
	s := b.serve(t, "-adopt-pins")
	s.waitLog(t, "cannot be shown to be this namespace's")
}

// TestInterfaceRecreatedWithSameIndex (finding 7): va deleted and made
// again with its old ifindex was never attached again: health stayed 503
// "NOT PROTECTING" for good. The service now sees the new instance (its
// link lost its device) and attaches the program, with its maps.
func TestInterfaceRecreatedWithSameIndex(t *testing.T) {
	l := newLab(t, "sameidx")
	s := l.serve(t)
	ctx := context.Background()
	_, err := l.client.Add(ctx, lists.DenyList, []string{"198.18.0.3/32"})
	require.NoError(t, err)
	var index int
	require.NoError(t, l.edge.Do(func() error {
		lk, err := netlink.LinkByName("va")
		if err != nil {
			return err
		}
		index = lk.Attrs().Index
		return netlink.LinkDel(lk)
	}))
	healthy := func() bool {
		h, err := l.client.Health(ctx)
		require.NoError(t, err)
		return h.Healthy
	}
	waitFor(t, "the service to report va gone", func() bool { return !healthy() })
	storm, err := os.Open("/run/netns/" + l.storm.Name)
	require.NoError(t, err)
	defer storm.Close()
	require.NoError(t, l.edge.Do(func() error {
		la := netlink.NewLinkAttrs()
		la.Name, la.Index = "va", index
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "vb", PeerNamespace: netlink.NsFd(int(storm.Fd()))}); err != nil {
			return err
		}
		lk, err := netlink.LinkByName("va")
		if err != nil {
			return err
		}
		if lk.Attrs().Index != index {
			return fmt.Errorf("va made again with index %d, asked %d", lk.Attrs().Index, index)
		}
		return netlink.LinkSetUp(lk)
	}))
	require.NoError(t, l.storm.Do(func() error {
		lk, err := netlink.LinkByName("vb")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lk)
	}))
	require.NoError(t, l.edge.AddAddr("va", "198.18.0.1/24"))
	require.NoError(t, l.storm.AddAddr("vb", "198.18.0.3/24"))
	waitFor(t, "the service to protect va again (same index "+fmt.Sprint(index)+")", healthy)
	ok, _ := xdpAttached(t, l)
	require.True(t, ok, "health is back but va has no XDP program:\n%s", s.out)
	before := denyDrops(t, l)
	f := l.sender(t, "198.18.0.3", 9999, time.Millisecond, 20)
	f.wg.Wait()
	waitFor(t, "deny drops on the new va", func() bool { return denyDrops(t, l) >= before+uint64(f.sent.Load()) })
}
