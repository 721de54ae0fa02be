package storm

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

var (
	testSrcMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	testDstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

// verify sums big-endian words the textbook way: a correct checksum makes
// the sum of the covered bytes 0xffff.
func verify(b []byte) bool {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return s == 0xffff
}

// checkFrame verifies every checksum of frame and returns its source.
func checkFrame(t *testing.T, frame []byte) netip.Addr {
	t.Helper()
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		ip := frame[14:34]
		assert.True(t, verify(ip), "IPv4 header checksum wrong: % x", ip)
		l4 := frame[34:]
		if ip[9] == 1 {
			assert.True(t, verify(l4), "ICMP checksum wrong")
		} else {
			pseudo := append(append([]byte{}, ip[12:20]...), 0, ip[9], byte(len(l4)>>8), byte(len(l4)))
			assert.True(t, verify(append(pseudo, l4...)), "IPv4 L4 (proto %d) checksum wrong", ip[9])
		}
		return netip.AddrFrom4([4]byte(ip[12:16]))
	case 0x86dd:
		ip := frame[14:54]
		l4 := frame[54:]
		nh := ip[6]
		if nh == 60 { // Destination Options: the L4 header follows it
			nh, l4 = l4[0], l4[(int(l4[1])+1)*8:]
		}
		pseudo := append(append([]byte{}, ip[8:40]...), 0, 0, byte(len(l4)>>8), byte(len(l4)), 0, 0, 0, nh)
		assert.True(t, verify(append(pseudo, l4...)), "IPv6 L4 (next header %d) checksum wrong", nh)
		return netip.AddrFrom16([16]byte(ip[8:24]))
	}
	require.FailNowf(t, "unknown EtherType", "% x", frame[:14])
	return netip.Addr{}
}

var templateCases = []struct {
	name string
	flow Flow
	dst  netip.Addr
}{
	{"ipv4 udp", Flow{UDP, Few4, 16}, Edge4},
	{"ipv4 tcp syn", Flow{TCPSYN, Many4, MaxMany4}, Edge4},
	{"ipv4 icmp", Flow{ICMP, Many4, 1000}, Edge4},
	{"ipv6 udp", Flow{UDP, Many6, 1 << 22}, Edge6},
	{"ipv6 tcp syn", Flow{TCPSYN, Few6, 3}, Edge6},
	{"ipv6 icmp", Flow{ICMP, Many6, 1 << 30}, Edge6},
	{"ipv4 tcp syn to another port", Flow{TCPSYNOther, Few4, 5}, Edge4},
	{"ipv6 tcp syn behind destination options", Flow{TCPSYNExt, Many6, 1 << 20}, Edge6},
}

func TestTemplateChecksums(t *testing.T) {
	for _, tc := range templateCases {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := BuildTemplate(tc.flow, testSrcMAC, testDstMAC, tc.dst)
			require.NoError(t, err, "BuildTemplate(%v)", tc.flow)
			frame := append([]byte{}, tpl.Frame...)
			for _, i := range []uint64{0, 1, 2, 255, 256, 65535, 65536, 1 << 21, 1<<32 + 7} {
				tpl.Rewrite(frame, i)
				got := checkFrame(t, frame)
				want := sourceN(tc.flow, i)
				assert.Equal(t, want, got, "Rewrite(%d): source", i)
			}
		})
	}
}

// sourceN is the flow's source number i: IPv4 addresses count up whole,
// IPv6 ones count /64s up (bits 32-63), their interface identifier fixed.
func sourceN(f Flow, i uint64) netip.Addr {
	a := f.First.As16()
	off := 4
	if f.First.Is4() {
		off = 12
	}
	w := binary.BigEndian.Uint32(a[off:]) + uint32(i%uint64(f.Count))
	binary.BigEndian.PutUint32(a[off:], w)
	if f.First.Is4() {
		return netip.AddrFrom16(a).Unmap()
	}
	return netip.AddrFrom16(a)
}

func TestFlowValidate(t *testing.T) {
	for _, tc := range []struct {
		flow Flow
		ok   bool
	}{
		{Flow{UDP, Few4, 16}, true},
		{Flow{UDP, Many4, MaxMany4}, true},
		{Flow{UDP, Many4, MaxMany4 + 1}, false}, // past 198.19.255.255
		{Flow{UDP, netip.MustParseAddr("10.0.0.1"), 1}, false},
		{Flow{UDP, netip.MustParseAddr("2001:db9::1"), 1}, false},
		{Flow{UDP, Many6, 1 << 30}, true},
		{Flow{UDP, netip.MustParseAddr("2001:db8:ffff:ffff::1"), 2}, false}, // wraps
		{Flow{UDP, netip.MustParseAddr("2001:db8::ffff:ffff"), 2}, true},    // only the /64 varies
		{Flow{UDP, Few4, 0}, false},
	} {
		err := tc.flow.Validate()
		assert.Equal(t, tc.ok, err == nil, "%v.Validate() = %v, want ok %v", tc.flow, err, tc.ok)
	}
}

// TestStormProgramMatchesRewrite runs bpf/storm.c (an ordinary test run, not
// live frames) and compares its output with Template.Rewrite, frame by frame.
func TestStormProgramMatchesRewrite(t *testing.T) {
	testutil.Root(t)
	g, err := NewXDPGenerator(nil, 0)
	require.NoError(t, err, "NewXDPGenerator")
	defer g.Close()
	for _, tc := range templateCases {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := BuildTemplate(tc.flow, testSrcMAC, testDstMAC, tc.dst)
			require.NoError(t, err)
			require.NoError(t, g.configure(&tpl))
			for _, seq := range []uint64{0, 5, 65535, 1 << 22, 1<<32 + 9} {
				require.NoError(t, g.objs.Seq.Set(seq))
				out := make([]byte, len(tpl.Frame))
				ret, err := g.objs.Storm.Run(&ebpf.RunOptions{Data: tpl.Frame, DataOut: out})
				require.NoError(t, err, "Run")
				require.EqualValues(t, 3, ret, "storm's verdict, want XDP_TX (3)")
				want := append([]byte{}, tpl.Frame...)
				tpl.Rewrite(want, seq)
				assert.True(t, bytes.Equal(out, want), "seq %d: program wrote\n% x\nwant\n% x", seq, out, want)

				checkFrame(t, out)
			}
		})
	}
}
