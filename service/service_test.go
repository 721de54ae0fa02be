package service

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// TestStartAndClose runs the wiring in a namespace of its own: the API
// answers with the token, the program is attached through a pinned link
// that outlives Close, and a second Start finds the state and adopts it.
func TestStartAndClose(t *testing.T) {
	testutil.Root(t)
	a, _, root := testEdge(t, "svc", "sva", "svb")
	const token = "service-test-token-0123456789"
	cfg := Config{
		Iface: "sva", PinRoot: root, TableSize: 4096,
		Deny: []netip.Prefix{netip.MustParsePrefix("198.18.7.0/24")},
		API:  API{Listen: "127.0.0.1:0", Token: token, AuthReads: true, NoProcessMetrics: true},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func() *Service {
		t.Helper()
		var s *Service
		require.NoError(t, a.Do(func() error {
			var err error
			s, err = Start(context.Background(), cfg, log)
			return err
		}), "Start")
		return s
	}
	s := start()
	cl := &client.Client{Base: "http://" + s.Addr().String(), Token: token,
		HTTP: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, n, addr string) (net.Conn, error) {
			var c net.Conn
			err := a.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, n, addr)
				return err
			})
			return c, err
		}}}}
	if h, err := cl.Health(context.Background()); assert.NoError(t, err, "Health") {
		assert.True(t, h.Healthy, "Health = %+v, want healthy", h)
	}
	if l, err := cl.List(context.Background(), lists.DenyList); assert.NoError(t, err, "deny list") {
		assert.Len(t, l.Prefixes, 1, "deny list = %+v, want the configured prefix", l)
	}
	prog := s.Attachment().Program
	require.NoError(t, s.Close(), "Close")
	assert.Equal(t, uint32(prog), attachedProgram(t, a, "sva"), "after Close, the program sva runs (the pinned link keeps it)")
	s2 := start()
	defer s2.Close()
	assert.True(t, s2.Attachment().Adopted, "the second Start did not adopt the pinned link")
	dir := s2.Attachment().PinDir
	if l, err := link.LoadPinnedLink(filepath.Join(dir, "link"), nil); assert.NoError(t, err, "no pinned link in %s", dir) {
		l.Close()
	}
}

func attachedProgram(t *testing.T, ns *topo.NS, dev string) uint32 {
	t.Helper()
	var id uint32
	require.NoError(t, ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			id = x.ProgId
		}
		return nil
	}))
	return id
}
