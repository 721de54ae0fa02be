package xdplb_test

// Attacks on the balancer (issue 30's review): a hostile network's frames
// and a careless operator's configurations. Each case names the attack.

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/xdplb"
)

// TestAttackLengthLies: the IP header's length field against the frame's.
// A short tot_len on a long frame must not carry the frame past the MTU
// into XDP_TX (where the driver drops it unseen: too big must be counted
// and passed); a length past the frame or below the ports, or an IPv6
// payload length of 0 (a jumbogram's, RFC 2675), is not balanced.
func TestAttackLengthLies(t *testing.T) {
	cfg := config(backends(b4...))
	cfg.MTU = small
	b := load(t, cfg)
	c4 := netip.MustParseAddr("198.18.50.20")
	c6 := netip.MustParseAddr("2001:db8:50::20")
	setLen4 := func(f []byte, n int) { binary.BigEndian.PutUint16(f[14+2:], uint16(n)) }
	setLen6 := func(f []byte, n int) { binary.BigEndian.PutUint16(f[14+4:], uint16(n)) }
	cases := []struct {
		name   string
		p      pkt
		forge  func(f []byte)
		reason string
	}{
		{"v4 short tot_len, frame past the MTU", pkt{c4, vip4, 40020, 80, "tcp", small}, func(f []byte) { setLen4(f, 60) }, "too_big"},
		{"v4 tot_len past the frame", pkt{c4, vip4, 40021, 80, "tcp", 10}, func(f []byte) { setLen4(f, 200) }, "malformed"},
		{"v4 tot_len below the ports", pkt{c4, vip4, 40022, 80, "tcp", 10}, func(f []byte) { setLen4(f, 22) }, "malformed"},
		{"v6 short payload_len, frame past the MTU", pkt{c6, vip6, 40023, 53, "udp", small}, func(f []byte) { setLen6(f, 20) }, "too_big"},
		{"v6 payload_len past the frame", pkt{c6, vip6, 40024, 53, "udp", 10}, func(f []byte) { setLen6(f, 300) }, "malformed"},
		{"v6 payload_len 0 (jumbogram)", pkt{c6, vip6, 40025, 53, "udp", 10}, func(f []byte) { setLen6(f, 0) }, "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := frame(t, tc.p)
			tc.forge(in)
			before := stats(t, b).Reasons[tc.reason]
			act, out := run(t, b.Program(), in)
			assert.Equal(t, sim.Pass, act, "action")
			assert.True(t, bytes.Equal(in, out), "frame unchanged")
			assert.Equal(t, before+1, stats(t, b).Reasons[tc.reason], "reason %s", tc.reason)
		})
	}
}

// icmpTooBig builds a router's "fragmentation needed" / "packet too big"
// addressed to dst, quoting the backend's answer VIP -> client of p.
func icmpTooBig(t *testing.T, p pkt, dst netip.Addr) []byte {
	t.Helper()
	answer := pkt{p.dst, p.src, p.dport, p.sport, p.proto, 0}
	quote := serialize(t, ipLayers(t, answer)...)
	var ls []gopacket.SerializableLayer
	if p.src.Is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4,
			SrcIP: netip.MustParseAddr("198.18.60.1").AsSlice(), DstIP: dst.AsSlice()}
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeFragmentationNeeded)}
		ls = []gopacket.SerializableLayer{ip, ic, gopacket.Payload(quote)}
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6,
			SrcIP: netip.MustParseAddr("2001:db8:60::1").AsSlice(), DstIP: dst.AsSlice()}
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0)}
		require.NoError(t, ic.SetNetworkLayerForChecksum(ip))
		ls = []gopacket.SerializableLayer{ip, ic, gopacket.Payload(append([]byte{0, 0, 5, 0}, quote...))}
	}
	eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: edgeMAC, EthernetType: ethType(p.src)}
	return serialize(t, append([]gopacket.SerializableLayer{eth}, ls...)...)
}

// TestAttackForgedICMP: an ICMP error is forgeable by anyone. One not
// addressed to the VIP it quotes is not the balancer's to steer, and none
// may write the connection table: a forged error for a flow never seen
// would pin that flow (a drained backend would keep getting it).
func TestAttackForgedICMP(t *testing.T) {
	t.Run("not addressed to the quoted VIP", func(t *testing.T) {
		b := load(t, config(backends(b4...)))
		for _, p := range []pkt{
			{netip.MustParseAddr("198.18.50.30"), vip4, 40030, 80, "tcp", 0},
			{netip.MustParseAddr("2001:db8:50::30"), vip6, 40030, 53, "udp", 0},
		} {
			other := netip.MustParseAddr("198.18.100.9")
			if p.src.Is6() {
				other = netip.MustParseAddr("2001:db8:100::9")
			}
			in := icmpTooBig(t, p, other)
			act, out := run(t, b.Program(), in)
			assert.Equal(t, sim.Pass, act, "ICMP to %s quoting %s", other, p.dst)
			assert.True(t, bytes.Equal(in, out), "frame unchanged")
		}
	})
	t.Run("does not learn", func(t *testing.T) {
		b := load(t, config(backends(b4...)))
		table := b.Table(web4)
		// A client's flow whose slot is b4[0], never seen before.
		var p pkt
		for i := 0; ; i++ {
			require.Less(t, i, 1000, "no flow on %s", b4[0])
			p = pkt{client(i), vip4, 40031, 80, "tcp", 0}
			if table[xdplb.FlowHash(p.src, p.dst, p.sport, p.dport, 6)%uint32(xdplb.RingSize)] == b4[0] {
				break
			}
		}
		act, out := run(t, b.Program(), icmpTooBig(t, p, vip4))
		require.Equal(t, sim.TX, act, "ICMP for an unseen flow goes to the ring's backend")
		require.Equal(t, b4[0], decode(t, out).dst(t))
		be := backends(b4...)
		be[0].Drain = true
		require.NoError(t, b.Apply(config(be)), "drain %s", b4[0])
		assert.NotEqual(t, b4[0], backendOf(t, b, p), "the forged ICMP pinned a new flow to a drained backend")
	})
}

// TestAttackStaleConnAcrossVIPs: backend ids are reused; a connection
// table entry learnt for one VIP's backend must not send the flow to
// whatever backend (of another VIP) holds that id later, and removing a
// backend must not wipe the new holder of its id (in one Apply, the old
// code gave the removed backend's id to VIP 2's backend and then cleared
// it: VIP 2 dropped everything as no_backend).
func TestAttackStaleConnAcrossVIPs(t *testing.T) {
	web2 := netip.MustParseAddr("198.18.100.2")
	other := netip.MustParseAddr("198.18.2.1")
	withVIP2 := func(v1 []xdplb.Backend) xdplb.Config {
		c := config(v1)
		c.VIPs = append(c.VIPs, xdplb.VIP{Addr: web2, Port: 80, Proto: "tcp", Backends: backends(other)})
		return c
	}
	for _, steps := range []struct {
		name     string
		oneApply bool
	}{{"one apply", true}, {"two applies", false}} {
		t.Run(steps.name, func(t *testing.T) {
			b := load(t, config(backends(b4...)))
			var flows []pkt
			for i := 0; i < 40; i++ {
				p := pkt{client(i), vip4, 40040, 80, "tcp", 0}
				if backendOf(t, b, p) == b4[0] {
					flows = append(flows, p)
				}
			}
			require.NotEmpty(t, flows, "no flow on %s", b4[0])
			if !steps.oneApply {
				require.NoError(t, b.Apply(config(backends(b4[1:]...))), "remove %s", b4[0])
			}
			require.NoError(t, b.Apply(withVIP2(backends(b4[1:]...))), "remove %s, add VIP 2", b4[0])
			for _, p := range flows {
				got := backendOf(t, b, p)
				assert.Contains(t, b4[1:], got, "flow %v of %s went to %s", p.src, vip4, got)
			}
			// And VIP 2 has its backend: removing the old holder of an id
			// must not wipe the new one.
			p := pkt{client(1), web2, 40041, 80, "tcp", 0}
			act, out := run(t, b.Program(), frame(t, p))
			require.Equal(t, sim.TX, act, "VIP 2's packet")
			assert.Equal(t, other, decode(t, out).dst(t), "VIP 2's backend")
		})
	}
}

// TestAttackCarelessConfig: configurations an operator can type that the
// balancer must refuse.
func TestAttackCarelessConfig(t *testing.T) {
	mod := func(f func(c *xdplb.Config)) xdplb.Config {
		c := config(backends(b4...))
		c.VIPs = append([]xdplb.VIP(nil), c.VIPs...)
		f(&c)
		return c
	}
	for name, c := range map[string]xdplb.Config{
		"backend is a VIP":       mod(func(c *xdplb.Config) { c.VIPs[0].Backends = backends(vip4) }),
		"backend is source4":     mod(func(c *xdplb.Config) { c.VIPs[0].Backends = backends(src4) }),
		"backend is source6":     mod(func(c *xdplb.Config) { c.VIPs[1].Backends = backends(src6) }),
		"backend multicast":      mod(func(c *xdplb.Config) { c.VIPs[0].Backends = backends(netip.MustParseAddr("224.0.0.1")) }),
		"backend broadcast":      mod(func(c *xdplb.Config) { c.VIPs[0].Backends = backends(netip.MustParseAddr("255.255.255.255")) }),
		"backend loopback":       mod(func(c *xdplb.Config) { c.VIPs[0].Backends = backends(netip.MustParseAddr("127.0.0.1")) }),
		"backend unspecified v6": mod(func(c *xdplb.Config) { c.VIPs[1].Backends = backends(netip.IPv6Unspecified()) }),
	} {
		assert.Error(t, c.Validate(), name)
	}
}

// TestAttackReplaceAllVIPs: an Apply that replaces many VIPs by as many
// others. The vips hash holds MaxVIPs; adding the new ones before
// removing the old failed half-way (E2BIG), leaving some new VIPs live
// and the rest of the configuration unapplied.
func TestAttackReplaceAllVIPs(t *testing.T) {
	many := func(third byte) xdplb.Config {
		c := config(backends(b4...))
		c.VIPs = nil
		for i := 0; i < xdplb.MaxVIPs; i++ {
			c.VIPs = append(c.VIPs, xdplb.VIP{Addr: netip.AddrFrom4([4]byte{198, 18, third, byte(i + 1)}), Port: 80, Proto: "tcp", Backends: backends(b4...)})
		}
		return c
	}
	b := load(t, many(100))
	require.NoError(t, b.Apply(many(101)), "replace %d VIPs by %d others", xdplb.MaxVIPs, xdplb.MaxVIPs)
	for _, third := range []byte{100, 101} {
		p := pkt{client(1), netip.AddrFrom4([4]byte{198, 18, third, 64}), 40050, 80, "tcp", 0}
		act, _ := run(t, b.Program(), frame(t, p))
		want := sim.TX
		if third == 100 {
			want = sim.Pass
		}
		assert.Equal(t, want, act, "packet to %s", p.dst)
	}
}

// TestAttackVIPToVIP: a request forged from one VIP's address and port
// to another (or the same) VIP. Balanced, the backend's answer goes to
// the source VIP and is balanced again: two UDP echo-like services bounce
// it through the edge without end. No client speaks from a VIP's address
// and port: such packets pass unbalanced, counted as vip_source.
func TestAttackVIPToVIP(t *testing.T) {
	b := load(t, config(backends(b4...)))
	for _, p := range []pkt{
		{vip4, vip4, 80, 80, "tcp", 10},
		{vip6, vip6, 53, 53, "udp", 10},
	} {
		in := frame(t, p)
		before := stats(t, b).Reasons["vip_source"]
		act, out := run(t, b.Program(), in)
		assert.Equal(t, sim.Pass, act, "from %s:%d to %s:%d", p.src, p.sport, p.dst, p.dport)
		assert.True(t, bytes.Equal(in, out), "frame unchanged")
		assert.Equal(t, before+1, stats(t, b).Reasons["vip_source"], "vip_source")
		p.sport++ // the VIP's address from another port: a client, balanced
		act, _ = run(t, b.Program(), frame(t, p))
		assert.Equal(t, sim.TX, act, "from %s:%d", p.src, p.sport)
	}
}

// TestAttackOuterDF: RFC 2003 section 3.1: when the inner header has
// Don't Fragment set, the outer header must have it too; without it a
// router on the way fragments the outer packet instead of telling the
// client (path MTU discovery through the tunnel breaks).
func TestAttackOuterDF(t *testing.T) {
	b := load(t, config(backends(b4...)))
	p := pkt{netip.MustParseAddr("198.18.50.60"), vip4, 40060, 80, "tcp", 100}
	in := frame(t, p) // ipLayers sets DF
	act, out := run(t, b.Program(), in)
	require.Equal(t, sim.TX, act)
	e := decode(t, out)
	require.NotNil(t, e.ip4, "outer IPv4")
	assert.Equal(t, layers.IPv4DontFragment, e.ip4.Flags&layers.IPv4DontFragment, "outer DF, inner has DF")
	in[14+6] &^= 0x40 // clear the inner DF (the checksum does not matter here)
	act, out = run(t, b.Program(), in)
	require.Equal(t, sim.TX, act)
	assert.Zero(t, decode(t, out).ip4.Flags&layers.IPv4DontFragment, "outer DF, inner without DF")
}

// TestAttackIPv6ExtensionHeaders: extension headers before UDP (RFC 8200
// 4.3 hop-by-hop, 4.6 destination options, 4.4 routing). The destination
// is final, and the ports are found, after hop-by-hop, destination
// options and a routing header with no segment left: balanced. A routing
// header with segments left (the destination is not final yet), a
// fragment header (later fragments carry no ports) and a chain longer
// than four headers pass unbalanced.
func TestAttackIPv6ExtensionHeaders(t *testing.T) {
	b := load(t, config(backends(b4...)))
	c := netip.MustParseAddr("2001:db8:50::70")
	hop := []byte{0, 0, 1, 4, 0, 0, 0, 0}   // next, len 0, PadN of 4 (RFC 8200 4.2)
	dst := []byte{0, 0, 1, 4, 0, 0, 0, 0}   // the same layout
	rt0 := []byte{0, 2, 0, 0, 0, 0, 0, 0}   // type 0, segments left 0, one address follows
	rt1 := []byte{0, 2, 0, 1, 0, 0, 0, 0}   // segments left 1
	frag := []byte{0, 0, 0, 1, 0, 0, 0, 42} // offset 0, more fragments
	type ext struct {
		nh   uint8
		body []byte
	}
	cases := []struct {
		name string
		exts []ext
		want sim.Action
	}{
		{"hop-by-hop", []ext{{0, hop}}, sim.TX},
		{"destination options", []ext{{60, dst}}, sim.TX},
		{"hop-by-hop, routing (0 left), destination", []ext{{0, hop}, {43, append(rt0, make([]byte, 16)...)}, {60, dst}}, sim.TX},
		{"routing, 1 segment left", []ext{{43, append(rt1, make([]byte, 16)...)}}, sim.Pass},
		{"fragment (first)", []ext{{44, frag}}, sim.Pass},
		{"five destination options", []ext{{60, dst}, {60, dst}, {60, dst}, {60, dst}, {60, dst}}, sim.Pass},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := pkt{c, vip6, uint16(40070 + i), 53, "udp", 20} // 12 bytes or more: gopacket decodes port 53 as DNS
			ls := ipLayers(t, p)
			ip := ls[0].(*layers.IPv6)
			var chain []byte
			for j, e := range tc.exts {
				h := append([]byte(nil), e.body...)
				h[0] = 17 // UDP after the last
				if j+1 < len(tc.exts) {
					h[0] = tc.exts[j+1].nh
				}
				chain = append(chain, h...)
			}
			ip.NextHeader = layers.IPProtocol(tc.exts[0].nh)
			eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: edgeMAC, EthernetType: layers.EthernetTypeIPv6}
			in := serialize(t, eth, ip, gopacket.Payload(append(chain, serialize(t, ls[1:]...)...)))
			act, out := run(t, b.Program(), in)
			require.Equal(t, tc.want, act, "action")
			if act != sim.TX {
				return
			}
			e := decode(t, out)
			assert.Equal(t, in[14:], e.inner, "inner packet unchanged")
			table := b.Table(dns6)
			assert.Equal(t, table[xdplb.FlowHash(p.src, p.dst, p.sport, p.dport, 17)%uint32(xdplb.RingSize)], e.dst(t), "backend: the flow's slot")
		})
	}
}
