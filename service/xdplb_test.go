package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/xdplb"
)

// TestXDPLBChained: with [xdplb] VIPs serve puts the balancer in the
// shield's pinned program array, where it stays after Close (the shield
// keeps balancing); a start without VIPs takes it out.
func TestXDPLBChained(t *testing.T) {
	testutil.Root(t)
	a, err := topo.New("svx-a")
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	b, err := topo.New("svx-b")
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	require.NoError(t, topo.Veth(a, "sxa", b, "sxb"))
	root := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-xdplb-%d", os.Getpid()))
	require.NoError(t, shield.EnsureBPFFS(root))
	t.Cleanup(func() {
		a.Do(func() error { return shield.Detach(root, "sxa") })
		os.RemoveAll(root)
	})
	cfg := Config{
		Iface: "sxa", PinRoot: root, TableSize: 4096,
		API: API{Listen: "127.0.0.1:0", NoProcessMetrics: true},
		XDPLB: xdplb.Config{NextHop: xdplb.MAC(net.HardwareAddr{2, 0, 0, 0, 0, 1}), Source4: netip.MustParseAddr("198.18.0.1"),
			VIPs: []xdplb.VIP{{Addr: netip.MustParseAddr("198.18.0.100"), Port: 80, Proto: "tcp",
				Backends: []xdplb.Backend{{Addr: netip.MustParseAddr("198.18.0.10")}}}}},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func() *Service {
		t.Helper()
		var s *Service
		require.NoError(t, a.Do(func() (err error) {
			s, err = Start(context.Background(), cfg, log)
			return err
		}), "Start")
		return s
	}
	// chained returns the id of the program in the pinned `next` array, 0
	// when it is empty.
	chained := func(s *Service) ebpf.ProgramID {
		t.Helper()
		m, err := ebpf.LoadPinnedMap(filepath.Join(s.Attachment().PinDir, "next"), nil)
		require.NoError(t, err, "open the pinned program array")
		defer m.Close()
		var id uint32
		if err := m.Lookup(uint32(0), &id); errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0
		} else {
			require.NoError(t, err)
		}
		return ebpf.ProgramID(id)
	}

	s := start()
	require.NotNil(t, s.XDPLB(), "balancer loaded")
	info, err := s.XDPLB().Program().Info()
	require.NoError(t, err)
	want, _ := info.ID()
	assert.Equal(t, want, chained(s), "the shield's next program: the balancer")
	assert.Len(t, s.XDPLB().Table("198.18.0.100:80/tcp"), xdplb.RingSize, "configured")
	require.NoError(t, s.Close())
	assert.Equal(t, want, chained(s), "after Close the balancer stays chained")

	cfg.XDPLB = xdplb.Config{}
	s2 := start()
	defer s2.Close()
	assert.Nil(t, s2.XDPLB(), "no balancer without VIPs")
	assert.Zero(t, chained(s2), "a start without VIPs unchains the balancer")
}
