package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield"
)

// TestStartAndClose runs the wiring in a namespace of its own: the API
// answers with the token, the program is attached through a pinned link
// that outlives Close, and a second Start finds the state and adopts it.
func TestStartAndClose(t *testing.T) {
	testutil.Root(t)
	a, err := topo.New("svc-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := topo.New("svc-b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := topo.Veth(a, "sva", b, "svb"); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-service-%d", os.Getpid()))
	if err := shield.EnsureBPFFS(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Do(func() error { return shield.Detach(root, "sva") })
		os.RemoveAll(root)
	})
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
		if err := a.Do(func() error {
			var err error
			s, err = Start(context.Background(), cfg, log)
			return err
		}); err != nil {
			t.Fatalf("Start: %v", err)
		}
		return s
	}
	s := start()
	cl := &api.Client{Base: "http://" + s.Addr().String(), Token: token,
		HTTP: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, n, addr string) (net.Conn, error) {
			var c net.Conn
			err := a.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, n, addr)
				return err
			})
			return c, err
		}}}}
	if h, err := cl.Health(context.Background()); err != nil || !h.Healthy {
		t.Errorf("Health = %+v, %v; want healthy", h, err)
	}
	if l, err := cl.List(context.Background(), shield.DenyList); err != nil || len(l.Prefixes) != 1 {
		t.Errorf("deny list = %+v, %v; want the configured prefix", l, err)
	}
	prog := s.Attachment().Program
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := attachedProgram(t, a, "sva"); got != uint32(prog) {
		t.Errorf("after Close, sva runs program %d, want %d (the pinned link keeps it)", got, prog)
	}
	s2 := start()
	defer s2.Close()
	if !s2.Attachment().Adopted {
		t.Error("the second Start did not adopt the pinned link")
	}
	dir := s2.Attachment().PinDir
	if l, err := link.LoadPinnedLink(filepath.Join(dir, "link"), nil); err != nil {
		t.Errorf("no pinned link in %s: %v", dir, err)
	} else {
		l.Close()
	}
}

func attachedProgram(t *testing.T, ns *topo.NS, dev string) uint32 {
	t.Helper()
	var id uint32
	if err := ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			id = x.ProgId
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return id
}
