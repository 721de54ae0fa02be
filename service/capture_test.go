package service

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// TestCaptureOnTheWire: frames a denied source sends over a veth come
// back from GET /v1/capture and the passing source's do not; a capture
// in flight when the service stops leaves the attached program's flag 0.
func TestCaptureOnTheWire(t *testing.T) {
	testutil.Root(t)
	a, b, root := testEdge(t, "cap", "cpa", "cpb")
	for _, c := range []struct {
		ns       *topo.NS
		dev, net string
	}{{a, "cpa", "198.18.7.1/24"}, {a, "cpa", "198.18.6.1/24"}, {b, "cpb", "198.18.7.2/24"}, {b, "cpb", "198.18.6.2/24"}} {
		require.NoError(t, c.ns.AddAddr(c.dev, c.net))
	}
	const token = "service-test-token-0123456789"
	cfg := Config{
		Iface: "cpa", PinRoot: root, TableSize: 4096,
		Deny: []netip.Prefix{netip.MustParsePrefix("198.18.7.2/32")},
		API:  API{Listen: "127.0.0.1:0", Token: token, NoProcessMetrics: true},
	}
	var s *Service
	require.NoError(t, a.Do(func() error {
		var err error
		s, err = Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		return err
	}))
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	cl := &client.Client{Base: "http://" + s.Addr().String(), Token: token,
		HTTP: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, n, addr string) (net.Conn, error) {
			var c net.Conn
			err := a.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, n, addr)
				return err
			})
			return c, err
		}}}}
	sh := s.Attachment().Shield
	flagOn := func() bool { v, err := sh.CaptureSample(); return err == nil && v != 0 }
	send := func(from, to string, n int) {
		t.Helper()
		require.NoError(t, b.Do(func() error {
			// Unconnected: the port unreachable a passed datagram
			// earns does not fail the next write.
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(from)})
			if err != nil {
				return err
			}
			defer c.Close()
			for i := 0; i < n; i++ {
				if _, err := c.WriteToUDP([]byte("capture-test"), &net.UDPAddr{IP: net.ParseIP(to), Port: 9}); err != nil {
					return err
				}
			}
			return nil
		}))
	}

	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		d, err := cl.Capture(context.Background(), 3, 20, 1)
		done <- result{d, err}
	}()
	require.Eventually(t, flagOn, 5*time.Second, 5*time.Millisecond)
	send("198.18.6.2", "198.18.6.1", 3) // passes
	send("198.18.7.2", "198.18.7.1", 5) // denied
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		require.Fail(t, "capture did not end at its count")
	}
	require.NoError(t, r.err)
	require.False(t, flagOn(), "capture left on after the request")
	pr, err := pcapgo.NewReader(bytes.NewReader(r.data))
	require.NoError(t, err)
	n := 0
	for {
		data, ci, err := pr.ReadPacketData()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Equal(t, len(data), ci.Length)
		p := gopacket.NewPacket(data, layers.LinkTypeEthernet, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		require.NotNil(t, ip, "frame %d is no IPv4 packet", n)
		require.Equal(t, "198.18.7.2", ip.SrcIP.String())
		require.Contains(t, string(data), "capture-test")
		n++
	}
	require.Equal(t, 3, n)

	// A capture in flight when the service stops: the stop ends it and
	// the program, which stays attached, reads 0.
	go func() {
		d, err := cl.Capture(context.Background(), 100, 30, 1)
		done <- result{d, err}
	}()
	require.Eventually(t, flagOn, 5*time.Second, 5*time.Millisecond)
	prog := s.Attachment().Program
	start := time.Now()
	require.NoError(t, s.Close())
	closed = true
	<-done
	require.Less(t, time.Since(start), 5*time.Second, "the stop waited for the capture")
	require.Zero(t, attachedCaptureSample(t, prog))
}

// attachedCaptureSample reads capture_sample from the .bss of the
// program with id (attached, no longer held by this process).
func attachedCaptureSample(t *testing.T, id ebpf.ProgramID) uint32 {
	t.Helper()
	spec, err := bpf.LoadShield()
	require.NoError(t, err)
	off := spec.Variables[bpf.ShieldVarCaptureSample].Offset
	m := testutil.ProgramMap(t, id, func(_ *ebpf.Map, mi *ebpf.MapInfo) bool { return strings.HasSuffix(mi.Name, ".bss") })
	defer m.Close()
	v := make([]byte, m.ValueSize())
	require.NoError(t, m.Lookup(uint32(0), &v))
	return uint32(v[off]) | uint32(v[off+1])<<8 | uint32(v[off+2])<<16 | uint32(v[off+3])<<24
}
