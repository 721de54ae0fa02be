package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/xdplb"
)

// TestXDPLBChained: with [xdplb] VIPs serve puts the balancer in the
// shield's pinned program array, where it stays after Close (the shield
// keeps balancing); a start without VIPs takes it out.
func TestXDPLBChained(t *testing.T) {
	testutil.Root(t)
	a, _, root := testEdge(t, "svx", "sxa", "sxb")
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

// TestChainPinnedProgram: a pinned XDP program named by Chain runs after
// the shield on what the shield passes, and only on that: a denied source
// is dropped by the shield before it; a start without Chain takes it out.
func TestChainPinnedProgram(t *testing.T) {
	testutil.Root(t)
	a, _, root := testEdge(t, "svc", "sca", "scb")
	// The other program: XDP_TX for every frame, a verdict the shield
	// never gives, so a frame that went through it is told apart.
	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "other", Type: ebpf.XDP, AttachType: ebpf.AttachXDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, int32(sim.TX)), asm.Return()}})
	require.NoError(t, err)
	defer other.Close()
	pin := filepath.Join(root, "other")
	require.NoError(t, other.Pin(pin))

	cfg := Config{
		Iface: "sca", PinRoot: root, TableSize: 4096,
		API:   API{Listen: "127.0.0.1:0", NoProcessMetrics: true},
		Deny:  []netip.Prefix{netip.MustParsePrefix("198.18.9.0/24")},
		Chain: pin,
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
	s := start()
	prog := s.Attachment().Shield.Program()
	for _, tc := range []struct {
		src  string
		want sim.Action
	}{{"198.18.1.1", sim.TX}, {"198.18.9.1", sim.Drop}} {
		got, err := sim.Run(prog, sim.From(tc.src, sim.UDP).Bytes())
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "a frame from %s with the other program chained", tc.src)
	}
	require.NoError(t, s.Close())

	cfg.Chain = ""
	s2 := start()
	defer s2.Close()
	got, err := sim.Run(s2.Attachment().Shield.Program(), sim.From("198.18.1.1", sim.UDP).Bytes())
	require.NoError(t, err)
	assert.Equal(t, sim.Pass, got, "a start without chain: the shield passes alone")
}
