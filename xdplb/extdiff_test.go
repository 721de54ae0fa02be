package xdplb_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/xdplb"
)

// balanceable says, from what gopacket decodes of an IPv6 frame, whether
// the balancer must balance it once a VIP sits at its destination, and
// the VIP to set: the destination and the port of the first TCP or UDP
// header gopacket finds (whether or not the frame is balanceable: a walk
// too lenient would find it too). Balanceable: TCP or UDP after at most four hop-by-hop, destination options
// or routing headers with no segment left, within a frame that holds the
// whole packet (payload length) and fits the MTU once encapsulated.
func balanceable(frame []byte) (xdplb.VIP, bool) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var ip6 *layers.IPv6
	exts := 0
	ok := true
	for _, l := range p.Layers() {
		switch l := l.(type) {
		case *layers.IPv6:
			if ip6 != nil {
				ok = false // the inner header of a tunnel
				continue
			}
			ip6 = l
		case *layers.IPv6HopByHop, *layers.IPv6Destination:
			exts++
		case *layers.IPv6Routing:
			if l.SegmentsLeft != 0 {
				ok = false
			}
			exts++
		case *layers.TCP, *layers.UDP:
			if ip6 == nil {
				return xdplb.VIP{}, false
			}
			if exts > 4 || int(ip6.Length)+40 > len(frame)-14 || ip6.Length == 0 || len(frame)-14+40 > 1500 {
				ok = false
			}
			dst, _ := netip.AddrFromSlice(ip6.DstIP)
			v := xdplb.VIP{Addr: dst, Proto: "udp", Backends: backends(b6[0])}
			if tcp, ok := l.(*layers.TCP); ok {
				v.Proto, v.Port = "tcp", uint16(tcp.DstPort)
			} else {
				v.Port = uint16(l.(*layers.UDP).DstPort)
			}
			return v, ok && v.Port != 0
		case *layers.IPv6Fragment, *layers.IPSecAH:
			ok = false
		}
	}
	return xdplb.VIP{}, false
}

// TestExtensionCapturesDifferential runs every IPv6 frame of tcpdump's
// extension-header captures (fixtures/tcpdump/README.md names each and its
// upstream commit) through the balancer with a VIP at the frame's own
// destination (the one gopacket decodes, or the raw destination with
// port 1), and compares its verdict with balanceable's.
func TestExtensionCapturesDifferential(t *testing.T) {
	b := load(t, config(backends(b4...)))
	files, err := filepath.Glob("../fixtures/tcpdump/*.pcap")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no capture in fixtures/tcpdump")
	runs, balanced := 0, 0
	for _, name := range files {
		f, err := os.Open(name)
		require.NoError(t, err)
		r, err := pcapgo.NewReader(f)
		require.NoError(t, err)
		for i := 0; ; i++ {
			data, _, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			frame := data
			if r.LinkType() != layers.LinkTypeEthernet {
				frame = sim.Raw(layers.EthernetTypeIPv6, data)
			}
			if len(frame) < 14+40 || binary.BigEndian.Uint16(frame[12:]) != uint16(layers.EthernetTypeIPv6) || frame[14]>>4 != 6 {
				continue
			}
			vip, want := balanceable(frame)
			if !vip.Addr.IsValid() {
				// No TCP or UDP decoded: a VIP at the raw destination and
				// the port the bytes after the fixed header would give.
				dst, _ := netip.AddrFromSlice(frame[14+24 : 14+40])
				port := uint16(1)
				if len(frame) >= 14+40+4 {
					port = binary.BigEndian.Uint16(frame[14+40+2:])
				}
				if port == 0 {
					port = 1
				}
				vip = xdplb.VIP{Addr: dst, Port: port, Proto: "udp", Backends: backends(b6[0])}
			}
			cfg := config(backends(b4...))
			cfg.VIPs = []xdplb.VIP{vip}
			require.NoError(t, b.Apply(cfg), "VIP %s", vip)
			act, _ := run(t, b.Program(), append([]byte(nil), frame...))
			runs++
			what := fmt.Sprintf("%s frame %d (%x)", filepath.Base(name), i, frame)
			if want {
				balanced++
				require.Equal(t, sim.TX, act, "balanced by gopacket's reading: %s", what)
			} else {
				require.NotEqual(t, sim.TX, act, "not balanceable by gopacket's reading: %s", what)
			}
		}
		f.Close()
	}
	require.NotZero(t, runs, "no IPv6 frame in the captures")
	t.Logf("%d IPv6 frames, %d balanceable", runs, balanced)
}
