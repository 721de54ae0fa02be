package xdplb_test

// Simulator tests: the balancer's every decision through BPF_PROG_TEST_RUN
// (sim.Run's runner, with the output frame kept), frames built and the
// encapsulation decoded with gopacket.

import (
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	shieldcfg "github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/xdplb"
)

var (
	clientMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	edgeMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	routerMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}

	vip4  = netip.MustParseAddr("198.18.100.1")
	vip6  = netip.MustParseAddr("2001:db8:100::1")
	src4  = netip.MustParseAddr("198.18.0.2")
	src6  = netip.MustParseAddr("2001:db8::2")
	b4    = []netip.Addr{netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("198.18.1.3")}
	b6    = []netip.Addr{netip.MustParseAddr("2001:db8:1::1"), netip.MustParseAddr("2001:db8:1::2")}
	web4  = "198.18.100.1:80/tcp"
	dns6  = "[2001:db8:100::1]:53/udp"
	mtu   = 1500
	small = 1280
)

func backends(addrs ...netip.Addr) []xdplb.Backend {
	out := make([]xdplb.Backend, len(addrs))
	for i, a := range addrs {
		out[i] = xdplb.Backend{Addr: a}
	}
	return out
}

func config(v4 []xdplb.Backend) xdplb.Config {
	return xdplb.Config{
		NextHop: xdplb.MAC(routerMAC), Source4: src4, Source6: src6, MTU: mtu,
		VIPs: []xdplb.VIP{
			{Addr: vip4, Port: 80, Proto: "tcp", Backends: v4},
			{Addr: vip6, Port: 53, Proto: "udp", Backends: backends(b6...)},
		},
	}
}

func load(t *testing.T, cfg xdplb.Config) *xdplb.Balancer {
	t.Helper()
	testutil.Root(t)
	b, err := xdplb.Load()
	require.NoError(t, err, "xdplb.Load()")
	t.Cleanup(func() { b.Close() })
	require.NoError(t, b.Apply(cfg), "Apply()")
	return b
}

type pkt struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        string // tcp, udp
	size         int    // payload bytes
}

func (p pkt) proto8() uint8 {
	if p.proto == "udp" {
		return 17
	}
	return 6
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...))
	return buf.Bytes()
}

// ipLayers builds the IP header and L4 of p, for a frame or an ICMP quote.
func ipLayers(t testing.TB, p pkt) []gopacket.SerializableLayer {
	t.Helper()
	var ip gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	if p.src.Is4() {
		v := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, TOS: 0x28, Flags: layers.IPv4DontFragment,
			SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice(), Protocol: layers.IPProtocol(p.proto8())}
		ip, nl = v, v
	} else {
		v := &layers.IPv6{Version: 6, HopLimit: 64, TrafficClass: 0x28,
			SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice(), NextHeader: layers.IPProtocol(p.proto8())}
		ip, nl = v, v
	}
	payload := gopacket.Payload(make([]byte, p.size))
	if p.proto == "udp" {
		u := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		require.NoError(t, u.SetNetworkLayerForChecksum(nl))
		return []gopacket.SerializableLayer{ip, u, payload}
	}
	tc := &layers.TCP{SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport), SYN: true, Window: 1000}
	require.NoError(t, tc.SetNetworkLayerForChecksum(nl))
	return []gopacket.SerializableLayer{ip, tc, payload}
}

func ethType(a netip.Addr) layers.EthernetType {
	if a.Is4() {
		return layers.EthernetTypeIPv4
	}
	return layers.EthernetTypeIPv6
}

func frame(t testing.TB, p pkt) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: edgeMAC, EthernetType: ethType(p.src)}
	return serialize(t, append([]gopacket.SerializableLayer{eth}, ipLayers(t, p)...)...)
}

// run runs frame through prog once and returns the action and the frame
// as the program left it.
func run(t *testing.T, prog *ebpf.Program, frame []byte) (sim.Action, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out, Repeat: 1}
	ret, err := prog.Run(opts)
	require.NoError(t, err, "test run")
	return sim.Action(ret), opts.DataOut
}

// outer decodes an encapsulated frame: its Ethernet header, the outer
// destination and the inner IP packet's bytes.
type encap struct {
	eth   *layers.Ethernet
	ip4   *layers.IPv4
	ip6   *layers.IPv6
	inner []byte
}

func decode(t *testing.T, b []byte) encap {
	t.Helper()
	p := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	require.Nil(t, p.ErrorLayer(), "decode %x", b)
	var e encap
	e.eth = p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if l := p.Layer(layers.LayerTypeIPv4); l != nil {
		e.ip4 = l.(*layers.IPv4)
		e.inner = e.ip4.Payload
	}
	if l := p.Layer(layers.LayerTypeIPv6); l != nil {
		e.ip6 = l.(*layers.IPv6)
		e.inner = e.ip6.Payload
	}
	return e
}

func (e encap) dst(t *testing.T) netip.Addr {
	t.Helper()
	if e.ip4 != nil {
		a, _ := netip.AddrFromSlice(e.ip4.DstIP)
		return a
	}
	require.NotNil(t, e.ip6, "no outer IP header")
	a, _ := netip.AddrFromSlice(e.ip6.DstIP)
	return a
}

// backendOf balances p and returns the backend it was sent to.
func backendOf(t *testing.T, b *xdplb.Balancer, p pkt) netip.Addr {
	t.Helper()
	act, out := run(t, b.Program(), frame(t, p))
	require.Equal(t, sim.TX, act, "action for %+v", p)
	return decode(t, out).dst(t)
}

func stats(t *testing.T, b *xdplb.Balancer) xdplb.Stats {
	t.Helper()
	s, err := b.Stats()
	require.NoError(t, err, "Stats()")
	return s
}

func client(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, 50, byte(i)})
}

func TestVIPMatch(t *testing.T) {
	b := load(t, config(backends(b4...)))
	c := netip.MustParseAddr("198.18.50.1")
	c6 := netip.MustParseAddr("2001:db8:50::1")
	cases := []struct {
		name   string
		p      pkt
		want   sim.Action
		reason string
	}{
		{"v4 vip tcp", pkt{c, vip4, 40000, 80, "tcp", 10}, sim.TX, "tx"},
		{"v4 vip other port", pkt{c, vip4, 40000, 81, "tcp", 10}, sim.Pass, "not_vip"},
		{"v4 vip other proto", pkt{c, vip4, 40000, 80, "udp", 10}, sim.Pass, "not_vip"},
		{"v4 other addr", pkt{c, netip.MustParseAddr("198.18.100.2"), 40000, 80, "tcp", 10}, sim.Pass, "not_vip"},
		{"v6 vip udp", pkt{c6, vip6, 40000, 53, "udp", 10}, sim.TX, "tx"},
		{"v6 vip tcp", pkt{c6, vip6, 40000, 53, "tcp", 10}, sim.Pass, "not_vip"},
		{"v4-looking v6 port", pkt{c6, vip6, 40000, 80, "udp", 10}, sim.Pass, "not_vip"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stats(t, b).Reasons[tc.reason]
			act, _ := run(t, b.Program(), frame(t, tc.p))
			assert.Equal(t, tc.want, act, "action")
			assert.Equal(t, before+1, stats(t, b).Reasons[tc.reason], "reason %s", tc.reason)
		})
	}
	t.Run("not ip", func(t *testing.T) {
		act, _ := run(t, b.Program(), sim.Raw(layers.EthernetTypeARP, make([]byte, 28)))
		assert.Equal(t, sim.Pass, act)
	})
}

// TestEncapsulation checks every byte that matters of IPIP and IP6IP6:
// Ethernet to the next hop from the edge's MAC, the outer header's fields
// and checksum, and the inner packet carried unchanged.
func TestEncapsulation(t *testing.T) {
	b := load(t, config(backends(b4...)))
	for _, p := range []pkt{
		{netip.MustParseAddr("198.18.50.7"), vip4, 40007, 80, "tcp", 100},
		{netip.MustParseAddr("2001:db8:50::7"), vip6, 40007, 53, "udp", 100},
	} {
		in := frame(t, p)
		act, out := run(t, b.Program(), in)
		require.Equal(t, sim.TX, act, "action for %+v", p)
		e := decode(t, out)
		assert.Equal(t, routerMAC, e.eth.DstMAC, "outer Ethernet destination: the next hop")
		assert.Equal(t, edgeMAC, e.eth.SrcMAC, "outer Ethernet source: the edge's MAC the frame came to")
		assert.Equal(t, in[14:], e.inner, "inner packet unchanged")
		name, table := web4, b.Table(web4)
		if p.src.Is6() {
			name, table = dns6, b.Table(dns6)
		}
		require.Len(t, table, xdplb.RingSize, "table of %s", name)
		want := table[xdplb.FlowHash(p.src, p.dst, p.sport, p.dport, p.proto8())%uint32(xdplb.RingSize)]
		assert.Equal(t, want, e.dst(t), "backend: the table's slot for the flow's hash")
		if p.src.Is4() {
			require.NotNil(t, e.ip4, "outer IPv4")
			assert.Equal(t, layers.IPProtocolIPv4, e.ip4.Protocol, "IPIP")
			assert.Equal(t, src4.AsSlice(), []byte(e.ip4.SrcIP.To4()))
			assert.Equal(t, uint8(64), e.ip4.TTL)
			assert.Equal(t, uint8(0x28), e.ip4.TOS, "TOS copied from the inner header")
			assert.Equal(t, uint16(len(in)-14+20), e.ip4.Length)
			// A header with its checksum sums to 0xffff (RFC 1071).
			var s uint32
			for i := 14; i < 34; i += 2 {
				s += uint32(out[i])<<8 | uint32(out[i+1])
			}
			s = s&0xffff + s>>16
			s = s&0xffff + s>>16
			assert.Equal(t, uint32(0xffff), s, "outer IPv4 checksum")
		} else {
			require.NotNil(t, e.ip6, "outer IPv6")
			assert.Equal(t, layers.IPProtocolIPv6, e.ip6.NextHeader, "IP6IP6")
			assert.Equal(t, src6.AsSlice(), []byte(e.ip6.SrcIP))
			assert.Equal(t, uint8(64), e.ip6.HopLimit)
			assert.Equal(t, uint8(0x28), e.ip6.TrafficClass)
			assert.Equal(t, uint16(len(in)-14), e.ip6.Length)
			assert.Equal(t, xdplb.FlowHash(p.src, p.dst, p.sport, p.dport, p.proto8())&0xfffff, e.ip6.FlowLabel)
		}
	}
}

// TestTableChoice: many flows land where the table says, and weights
// share the flows out.
func TestTableChoice(t *testing.T) {
	be := backends(b4...)
	be[2].Weight = 2
	b := load(t, config(be))
	table := b.Table(web4)
	got := map[netip.Addr]int{}
	const n = 400
	for i := 0; i < n; i++ {
		p := pkt{client(i % 250), vip4, uint16(20000 + i), 80, "tcp", 0}
		dst := backendOf(t, b, p)
		require.Equal(t, table[xdplb.FlowHash(p.src, p.dst, p.sport, p.dport, 6)%uint32(xdplb.RingSize)], dst, "flow %d", i)
		got[dst]++
	}
	// Shares 1:1:2 of 400 flows; a binomial's 4 sigma is ~35.
	assert.InDelta(t, 100, got[b4[0]], 40, "share of %s: %v", b4[0], got)
	assert.InDelta(t, 100, got[b4[1]], 40, "share of %s: %v", b4[1], got)
	assert.InDelta(t, 200, got[b4[2]], 40, "share of %s: %v", b4[2], got)
	s := stats(t, b)
	assert.Equal(t, uint64(n), s.VIPs[web4].Packets, "VIP packets")
	for _, a := range b4 {
		assert.Equal(t, uint64(got[a]), s.Backends[a].Packets, "packets of %s", a)
	}
}

// TestConnTable: a flow keeps its backend when the table changes under
// it (drain), new flows leave the drained backend, and a removed
// backend's flows move.
func TestConnTable(t *testing.T) {
	b := load(t, config(backends(b4...)))
	var flows []pkt
	first := map[int]netip.Addr{}
	for i := 0; i < 60; i++ {
		p := pkt{client(i), vip4, 30000, 80, "tcp", 0}
		flows = append(flows, p)
		first[i] = backendOf(t, b, p)
	}
	drained := b4[0]
	be := backends(b4...)
	be[0].Drain = true
	require.NoError(t, b.Apply(config(be)), "drain %s", drained)
	for _, a := range b.Table(web4) {
		require.NotEqual(t, drained, a, "drained backend still in the table")
	}
	moved := 0
	for i, p := range flows {
		assert.Equal(t, first[i], backendOf(t, b, p), "established flow %d kept its backend", i)
	}
	for i := 0; i < 60; i++ {
		p := pkt{client(100 + i), vip4, 30001, 80, "tcp", 0}
		assert.NotEqual(t, drained, backendOf(t, b, p), "new flow %d to the drained backend", i)
	}
	require.NoError(t, b.Apply(config(backends(b4[1:]...))), "remove %s", drained)
	for i, p := range flows {
		got := backendOf(t, b, p)
		if first[i] == drained {
			assert.NotEqual(t, drained, got, "flow %d still sent to a removed backend", i)
			moved++
		} else {
			assert.Equal(t, first[i], got, "flow %d of a remaining backend moved", i)
		}
	}
	assert.Positive(t, moved, "no flow was on the removed backend: the test proves nothing")
	assert.Positive(t, stats(t, b).Reasons["conn_hit"], "connection table hits")
}

// TestTooBig: a packet that would not fit the MTU once encapsulated
// passes to the stack unchanged and is counted.
func TestTooBig(t *testing.T) {
	cfg := config(backends(b4...))
	cfg.MTU = small
	b := load(t, cfg)
	for _, p := range []pkt{
		{netip.MustParseAddr("198.18.50.9"), vip4, 40009, 80, "tcp", small - 20 - 20 - 20 + 1},
		{netip.MustParseAddr("2001:db8:50::9"), vip6, 40009, 53, "udp", small - 40 - 8 - 40 + 1},
	} {
		in := frame(t, p)
		before := stats(t, b).Reasons["too_big"]
		act, out := run(t, b.Program(), in)
		assert.Equal(t, sim.Pass, act, "too big: %+v", p)
		assert.Equal(t, in, out, "frame unchanged")
		assert.Equal(t, before+1, stats(t, b).Reasons["too_big"], "too_big")
		p.size--
		act, _ = run(t, b.Program(), frame(t, p))
		assert.Equal(t, sim.TX, act, "one byte less fits: %+v", p)
	}
}

// TestICMPTooBig: a router's "fragmentation needed" (RFC 792) or "packet
// too big" (RFC 4443) about a packet a backend sent from the VIP reaches
// the backend that serves the quoted flow.
func TestICMPTooBig(t *testing.T) {
	b := load(t, config(backends(b4...)))
	router4 := netip.MustParseAddr("198.18.60.1")
	router6 := netip.MustParseAddr("2001:db8:60::1")
	for _, p := range []pkt{
		{netip.MustParseAddr("198.18.50.11"), vip4, 40011, 80, "tcp", 0},
		{netip.MustParseAddr("2001:db8:50::11"), vip6, 40011, 53, "udp", 0},
	} {
		want := backendOf(t, b, p)
		// The backend's answer, VIP -> client, quoted by the router.
		answer := pkt{p.dst, p.src, p.dport, p.sport, p.proto, 0}
		quote := serialize(t, ipLayers(t, answer)...)
		var ls []gopacket.SerializableLayer
		if p.src.Is4() {
			ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: router4.AsSlice(), DstIP: vip4.AsSlice()}
			ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeFragmentationNeeded)}
			ls = []gopacket.SerializableLayer{ip, ic, gopacket.Payload(quote)}
		} else {
			ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6, SrcIP: router6.AsSlice(), DstIP: vip6.AsSlice()}
			ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0)}
			require.NoError(t, ic.SetNetworkLayerForChecksum(ip))
			ls = []gopacket.SerializableLayer{ip, ic, gopacket.Payload(append([]byte{0, 0, 5, 0}, quote...))}
		}
		eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: edgeMAC, EthernetType: ethType(p.src)}
		in := serialize(t, append([]gopacket.SerializableLayer{eth}, ls...)...)
		before := stats(t, b).Reasons["icmp_tx"]
		act, out := run(t, b.Program(), in)
		require.Equal(t, sim.TX, act, "ICMP too-big for %+v", p)
		e := decode(t, out)
		assert.Equal(t, want, e.dst(t), "ICMP sent to the flow's backend")
		assert.Equal(t, in[14:], e.inner, "ICMP carried unchanged")
		assert.Equal(t, before+1, stats(t, b).Reasons["icmp_tx"], "icmp_tx")
	}
}

// TestBehindShield: the shield judges first and tail-calls the balancer
// for what it passes; without the balancer chained it passes.
func TestBehindShield(t *testing.T) {
	b := load(t, config(backends(b4...)))
	s, err := shield.Load(shield.Options{TableSize: 1024, Clock: shieldcfg.ClockVirtual, Limits: shieldcfg.DefaultLimits()})
	require.NoError(t, err, "shield.Load()")
	t.Cleanup(func() { s.Close() })
	p := pkt{netip.MustParseAddr("198.18.50.12"), vip4, 40012, 80, "tcp", 0}
	act, _ := run(t, s.Program(), frame(t, p))
	require.Equal(t, sim.Pass, act, "shield alone")
	require.NoError(t, b.Chain(s.Next()), "Chain()")
	act, out := run(t, s.Program(), frame(t, p))
	require.Equal(t, sim.TX, act, "shield, then the balancer")
	assert.Equal(t, backendOf(t, b, p), decode(t, out).dst(t))
	ps, err := lists.ParsePrefixes([]string{"198.18.50.12/32"})
	require.NoError(t, err)
	_, err = s.Add(lists.DenyList, ps)
	require.NoError(t, err, "deny the client")
	act, _ = run(t, s.Program(), frame(t, p))
	assert.Equal(t, sim.Drop, act, "the shield's drop is final")
	require.NoError(t, xdplb.Unchain(s.Next()), "Unchain()")
}

func TestValidate(t *testing.T) {
	ok := config(backends(b4...))
	require.NoError(t, ok.Validate())
	mod := func(f func(c *xdplb.Config)) xdplb.Config {
		c := config(backends(b4...))
		c.VIPs = append([]xdplb.VIP(nil), c.VIPs...)
		f(&c)
		return c
	}
	for name, c := range map[string]xdplb.Config{
		"no next hop":   mod(func(c *xdplb.Config) { c.NextHop = nil }),
		"bad proto":     mod(func(c *xdplb.Config) { c.VIPs[0].Proto = "sctp" }),
		"port 0":        mod(func(c *xdplb.Config) { c.VIPs[0].Port = 0 }),
		"family mix":    mod(func(c *xdplb.Config) { c.VIPs[0].Backends = backends(b6[0]) }),
		"all drained":   mod(func(c *xdplb.Config) { c.VIPs[0].Backends = []xdplb.Backend{{Addr: b4[0], Drain: true}} }),
		"duplicate vip": mod(func(c *xdplb.Config) { c.VIPs = append(c.VIPs, c.VIPs[0]) }),
		"no source4":    mod(func(c *xdplb.Config) { c.Source4 = netip.Addr{} }),
		"mtu":           mod(func(c *xdplb.Config) { c.MTU = 100 }),
		"weight":        mod(func(c *xdplb.Config) { c.VIPs[0].Backends[0].Weight = xdplb.MaxWeight + 1 }),
	} {
		assert.Error(t, c.Validate(), name)
	}
}
