package service

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// testEdge is where a service test starts a service: namespaces role-a
// and role-b joined by a veth (dev in a, peer in b) and a pin root of the
// test's own under /sys/fs/bpf; the shield on dev is detached and the
// root removed when the test ends.
func testEdge(t *testing.T, role, dev, peer string) (a, b *topo.NS, root string) {
	t.Helper()
	a, err := topo.New(role + "-a")
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	b, err = topo.New(role + "-b")
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	require.NoError(t, topo.Veth(a, dev, b, peer))
	root = filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-%s-%d", role, os.Getpid()))
	require.NoError(t, pinfs.EnsureBPFFS(root))
	t.Cleanup(func() {
		a.Do(func() error { return pin.Detach(root, dev) })
		os.RemoveAll(root)
	})
	return a, b, root
}
