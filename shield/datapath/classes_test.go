package datapath

import (
	"fmt"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/sim"
)

// Extension headers of the issue-23 attacks and of chains around the
// walk's bound (bpf/shield.h, IPV6_MAX_EXT: 6).
var (
	destOpts8 = sim.Ext{Type: layers.IPProtocolIPv6Destination, Len: 8}
	hopByHop  = sim.Ext{Type: layers.IPProtocolIPv6HopByHop, Len: 8}
	routing   = sim.Ext{Type: layers.IPProtocolIPv6Routing, Len: 24}
	atomic    = sim.Ext{Type: layers.IPProtocolIPv6Fragment, Len: 8}
	firstFrag = sim.Ext{Type: layers.IPProtocolIPv6Fragment, Len: 8, More: true}
	laterFrag = sim.Ext{Type: layers.IPProtocolIPv6Fragment, Len: 8, Offset: 2}
	auth      = sim.Ext{Type: layers.IPProtocolAH, Len: 24}
	// rfc8200Order is RFC 8200 4.1's recommended order, all six.
	rfc8200Order = []sim.Ext{hopByHop, destOpts8, routing, atomic, auth, {Type: layers.IPProtocolIPv6Destination, Len: 16}}
)

// TestExtensionHeadersLimited (issue 23, finding 1): a SYN to tcp/443
// behind IPv6 extension headers (an 8-byte Destination Options header, an
// atomic fragment, any chain the walk covers) is limited as the plain
// SYN is, under its upper-layer protocol: from one source 3 bursts of
// SYNs at one instant, a burst passes and the rest is limited. A chain
// the walk cannot finish (past its bound, or cut short) is limited too,
// counted as "other"; a non-first fragment (no ports) as protected TCP.
// Before the walk, every one of them was "other" and judged unprotected:
// 6,000 of 6,000 passed.
func TestExtensionHeadersLimited(t *testing.T) {
	def := shortBurst(config.DefaultLimits())
	n := 3 * def.Burst // 6,000 with the defaults
	tcp, other := counter.ProtoTCP, counter.ProtoOther
	seven := append(append([]sim.Ext{}, rfc8200Order...), destOpts8)
	for _, tc := range []struct {
		name  string
		ext   []sim.Ext
		seg   sim.Seg
		proto counter.Proto
		cut   int // bytes cut off the frame's end
	}{
		{name: "plain SYN", proto: tcp},
		{name: "destination options, 8 bytes", ext: []sim.Ext{destOpts8}, proto: tcp},
		{name: "atomic fragment", ext: []sim.Ext{atomic}, proto: tcp},
		{name: "first fragment", ext: []sim.Ext{firstFrag}, proto: tcp},
		{name: "hop-by-hop, routing, destination options", ext: []sim.Ext{hopByHop, routing, destOpts8}, proto: tcp},
		{name: "authentication header", ext: []sim.Ext{auth}, proto: tcp},
		{name: "RFC 8200 order, six headers", ext: rfc8200Order, proto: tcp},
		{name: "seven headers: past the bound", ext: seven, proto: other},
		{name: "an ACK to an ephemeral port past the bound", ext: seven, seg: sim.ACK, proto: other},
		{name: "a chain cut short", ext: []sim.Ext{hopByHop, {Type: layers.IPProtocolIPv6Destination, Len: 2048}}, proto: other, cut: 2000},
		{name: "a non-first fragment of an ACK", ext: []sim.Ext{laterFrag}, seg: sim.ACK, proto: tcp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := load(t, 4096, def)
			f := sim.Frame{Src: netipAddr("2001:db8:23::1"), Dst: netipAddr("2001:db8:ffff::fffe"), L4: sim.TCP, SrcPort: 50000, DstPort: 443, Seg: tc.seg, Ext: tc.ext}
			if tc.seg == sim.ACK {
				f.DstPort = 40000 // return traffic if it were walked
			}
			b := f.Bytes()
			b = b[:len(b)-tc.cut]
			sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
				{Name: "a burst passes", At: sec, Frame: b, Times: int(def.Burst), Want: sim.Pass, Delta: N(def.Burst, pass, counter.ReasonOK, tc.proto)},
				{Name: "the rest is limited", At: sec, Frame: b, Times: int(n - def.Burst), Want: sim.Drop, Delta: N(n-def.Burst, drop, counter.ReasonLimit, tc.proto)},
			}}.Run(t)
		})
	}
}

// TestUnprotectedIsReturnTraffic (issue 23, finding 2): with the default
// limits (tcp/80, tcp/443 and udp/443 named), the unprotected class is
// return traffic to the edge's ephemeral ports (32768-60999 unless set)
// and nothing else: SYNs to tcp/22 and ICMP echo get a client's burst,
// not 250,000, and so does a SYN to an ephemeral port; an ACK, a SYN+ACK,
// UDP and an ICMP error quoting the edge's UDP flow, to an ephemeral port,
// are return traffic; so is an ACK behind a Destination Options header.
func TestUnprotectedIsReturnTraffic(t *testing.T) {
	def := shortBurst(config.DefaultLimits())
	n := 3 * def.Burst
	tcp, udp, icmp := counter.ProtoTCP, counter.ProtoUDP, counter.ProtoICMP
	protected := func(p counter.Proto) (sim.Action, map[string]uint64, sim.Action, map[string]uint64) {
		return sim.Pass, N(def.Burst, pass, counter.ReasonOK, p), sim.Drop, N(n-def.Burst, drop, counter.ReasonLimit, p)
	}
	for _, tc := range []struct {
		name      string
		f         sim.Frame
		ret       bool
		proto     counter.Proto
		ephemeral config.PortRange // zero: the default
	}{
		{name: "SYN to tcp/22", f: sim.Frame{L4: sim.TCP, DstPort: 22}, proto: tcp},
		{name: "IPv6 SYN to tcp/22", f: sim.Frame{L4: sim.TCP, DstPort: 22, Src: netipAddr("2001:db8:23::1")}, proto: tcp},
		{name: "ICMP echo", f: sim.Frame{L4: sim.ICMP}, proto: icmp},
		{name: "ICMPv6 echo", f: sim.Frame{L4: sim.ICMP, Src: netipAddr("2001:db8:23::1")}, proto: icmp},
		{name: "SYN to an ephemeral port", f: sim.Frame{L4: sim.TCP, DstPort: 40000}, proto: tcp},
		{name: "ACK to tcp/22", f: sim.Frame{L4: sim.TCP, DstPort: 22, Seg: sim.ACK}, proto: tcp},
		{name: "UDP to udp/53", f: sim.Frame{L4: sim.UDP, DstPort: 53}, proto: udp},
		{name: "UDP past the range", f: sim.Frame{L4: sim.UDP, DstPort: 61000}, proto: udp},
		{name: "an error quoting the edge's udp/53", f: sim.Frame{L4: sim.Unreachable, DstPort: 53}, proto: icmp},
		{name: "ACK to tcp/443 (named)", f: sim.Frame{L4: sim.TCP, DstPort: 443, Seg: sim.ACK}, proto: tcp},
		{name: "ACK to an ephemeral port", f: sim.Frame{L4: sim.TCP, DstPort: 40000, Seg: sim.ACK}, ret: true, proto: tcp},
		{name: "SYN+ACK to an ephemeral port", f: sim.Frame{L4: sim.TCP, DstPort: 40000, Seg: sim.SYNACK}, ret: true, proto: tcp},
		{name: "UDP to an ephemeral port", f: sim.Frame{L4: sim.UDP, DstPort: 32768}, ret: true, proto: udp},
		{name: "UDP to the range's last port", f: sim.Frame{L4: sim.UDP, DstPort: 60999}, ret: true, proto: udp},
		{name: "an ICMP error quoting the edge's flow", f: sim.Frame{L4: sim.Unreachable, DstPort: 40000}, ret: true, proto: icmp},
		{name: "an ICMPv6 error quoting the edge's flow", f: sim.Frame{L4: sim.Unreachable, DstPort: 40000, Src: netipAddr("2001:db8:23::1")}, ret: true, proto: icmp},
		{name: "IPv6 ACK behind destination options", f: sim.Frame{L4: sim.TCP, DstPort: 40000, Seg: sim.ACK, Src: netipAddr("2001:db8:23::1"), Ext: []sim.Ext{destOpts8}}, ret: true, proto: tcp},
		{name: "a range of the namespace's own", f: sim.Frame{L4: sim.UDP, DstPort: 1024}, ret: true, proto: udp, ephemeral: config.PortRange{Lo: 1024, Hi: 2048}},
		{name: "outside a range of the namespace's own", f: sim.Frame{L4: sim.UDP, DstPort: 40000}, proto: udp, ephemeral: config.PortRange{Lo: 1024, Hi: 2048}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := load(t, 4096, def)
			if tc.ephemeral != (config.PortRange{}) {
				require.NoError(t, s.SetEphemeral(tc.ephemeral), "SetEphemeral(%s)", tc.ephemeral)
			}
			f := tc.f
			f.Dst = netipAddr("198.18.255.254")
			if !f.Src.IsValid() {
				f.Src = netipAddr("198.18.23.1")
			}
			if f.Src.Is6() {
				f.Dst = netipAddr("2001:db8:ffff::fffe")
			}
			f.SrcPort = 443
			b := f.Bytes()
			okWant, okDelta, overWant, overDelta := protected(tc.proto)
			if tc.ret {
				okWant, okDelta = sim.Pass, N(def.Burst, pass, counter.ReasonUnprotected, tc.proto)
				overWant, overDelta = sim.Pass, N(n-def.Burst, pass, counter.ReasonUnprotected, tc.proto)
			}
			sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
				{Name: fmt.Sprintf("first %d", def.Burst), At: sec, Frame: b, Times: int(def.Burst), Want: okWant, Delta: okDelta},
				{Name: fmt.Sprintf("next %d", n-def.Burst), At: sec, Frame: b, Times: int(n - def.Burst), Want: overWant, Delta: overDelta},
			}}.Run(t)
		})
	}
}

// shortBurst is l with a tenth of its burst under -short (the VM matrix):
// the same judgement on a tenth of the frames. Before 5.18 every
// BPF_PROG_TEST_RUN of an XDP program re-patches the XDP dispatcher twice,
// which TCG pays dearly for: these two tests took 229 s of 5.10's run at
// the default burst, 29 s of 6.12's. The host runs the counts.
func shortBurst(l config.Limits) config.Limits {
	if testing.Short() {
		l.Burst /= 10
	}
	return l
}
