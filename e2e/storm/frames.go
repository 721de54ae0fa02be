package storm

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// Proto is the L4 protocol of a storm flow.
type Proto uint8

const (
	UDP    Proto = iota // to the edge's datagram service, DatagramPort
	TCPSYN              // SYN to the edge's HTTPS port: the flood a listener fears
	ICMP                // echo request (ICMP or ICMPv6)
	// TCPSYNOther is a SYN to a port no protected destination names
	// (OtherPort): before issue 23, the unprotected class's.
	TCPSYNOther
	// TCPSYNExt is TCPSYN behind an 8-byte IPv6 Destination Options
	// header (IPv6 only): before issue 23, "other" and unprotected.
	TCPSYNExt
)

func (p Proto) String() string {
	return [...]string{"udp", "tcp-syn", "icmp", "tcp-syn-other-port", "tcp-syn-dstopts"}[p]
}

// OtherPort is the port TCPSYNOther floods: SSH's, which no storm limit
// names.
const OtherPort = 22

// Ports and sizes of the generated frames.
const (
	stormPort  = 40000 // source port of every generated frame
	payloadLen = 18    // makes the IPv4/UDP frame 60 bytes, Ethernet's minimum
)

// Flow is one stream of generated frames: every frame carries the same
// headers except the source address, which cycles through Count addresses
// starting at First. One aligned 32-bit word of the address varies (so
// First's word plus Count must not wrap): an IPv4 address whole, and an
// IPv6 address's bits 32-63, so each IPv6 source lies in a /64 of its own,
// as a forger facing a shield that keys IPv6 sources by /64 would send.
type Flow struct {
	Proto Proto
	First netip.Addr
	Count uint32
}

// wordOff is where, in First.As16(), the varying 32-bit word starts.
func (f Flow) wordOff() int {
	if f.First.Is4() {
		return 12
	}
	return 4
}

// Source returns the flow's source number i (modulo Count).
func (f Flow) Source(i uint32) netip.Addr {
	a := f.First.As16()
	off := f.wordOff()
	binary.BigEndian.PutUint32(a[off:], binary.BigEndian.Uint32(a[off:])+i%max(f.Count, 1))
	if f.First.Is4() {
		return netip.AddrFrom16(a).Unmap()
	}
	return netip.AddrFrom16(a)
}

func (f Flow) String() string {
	fam := "ipv4"
	if f.First.Is6() {
		fam = "ipv6"
	}
	return fmt.Sprintf("%s/%s x%d from %s", fam, f.Proto, f.Count, f.First)
}

// Last is the last source the flow uses.
func (f Flow) Last() netip.Addr { return f.Source(f.Count - 1) }

// Validate checks the flow's sources do not wrap and stay inside the
// documentation and benchmarking ranges.
func (f Flow) Validate() error {
	if f.Count == 0 {
		return fmt.Errorf("flow %s: no sources", f)
	}
	if f.Proto == TCPSYNExt && f.First.Is4() {
		return fmt.Errorf("flow %s: extension headers are IPv6's", f)
	}
	a := f.First.As16()
	if uint64(binary.BigEndian.Uint32(a[f.wordOff():]))+uint64(f.Count) > 1<<32 {
		return fmt.Errorf("flow %s: sources wrap", f)
	}
	for _, x := range []netip.Addr{f.First, f.Last()} {
		if !Safe(x) {
			return fmt.Errorf("flow %s: %s is outside %s and %s", f, x, safe4, safe6)
		}
	}
	return nil
}

// The only ranges a storm may use: RFC 2544 benchmarking and RFC 3849
// documentation addresses.
var (
	safe4 = netip.MustParsePrefix("198.18.0.0/15")
	safe6 = netip.MustParsePrefix("2001:db8::/32")
)

// Safe reports whether a is inside the ranges a storm may use.
func Safe(a netip.Addr) bool { return safe4.Contains(a) || safe6.Contains(a) }

// Template is one flow's frame as handed to a generator, with what the
// generator needs to rewrite the source of each copy.
type Template struct {
	Frame     []byte
	Count     uint32 // sources cycled through
	Base      uint32 // the varying 32 bits of the first source (Flow)
	AddrOff   int    // offset of those 32 bits
	IPCsumOff int    // IPv4 header checksum; 0: none
	L4CsumOff int    // L4 checksum covering the source; 0: none
	// Ones' complement sums of native-order (little-endian) 16-bit words,
	// with the varying 32 bits and the checksum itself left out.
	IPCsumBase uint32
	L4CsumBase uint32
	// Next is the sequence number of the template's next frame; its source
	// is Base + Next % Count. The generators keep one sequence per
	// template, so whatever else they interleave, the n frames a template
	// sends give each of its sources n/Count of them, within one.
	Next uint64
}

// BuildTemplate makes the frame of flow f from srcMAC to dstMAC, addressed
// to dst (of f's family).
func BuildTemplate(f Flow, srcMAC, dstMAC net.HardwareAddr, dst netip.Addr) (Template, error) {
	if err := f.Validate(); err != nil {
		return Template{}, err
	}
	if f.First.Is4() != dst.Is4() {
		return Template{}, fmt.Errorf("flow %s: destination %s of the other family", f, dst)
	}
	var l4 []byte
	var ipProto byte
	switch f.Proto {
	case UDP:
		ipProto = 17
		l4 = make([]byte, 8+payloadLen)
		binary.BigEndian.PutUint16(l4[0:], stormPort)
		binary.BigEndian.PutUint16(l4[2:], DatagramPort)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], "xdpshield storm   ")
	case TCPSYN, TCPSYNOther, TCPSYNExt:
		ipProto = 6
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint16(l4[0:], stormPort)
		binary.BigEndian.PutUint16(l4[2:], EdgePort)
		if f.Proto == TCPSYNOther {
			binary.BigEndian.PutUint16(l4[2:], OtherPort)
		}
		binary.BigEndian.PutUint32(l4[4:], 0x5eed5eed) // sequence number
		l4[12] = 5 << 4                                // data offset
		l4[13] = 0x02                                  // SYN
		binary.BigEndian.PutUint16(l4[14:], 64240)     // window
	case ICMP:
		ipProto = 1
		l4 = make([]byte, 8+payloadLen)
		l4[0] = 8 // echo request
		if f.First.Is6() {
			ipProto = 58
			l4[0] = 128
		}
		binary.BigEndian.PutUint16(l4[4:], 0x5eed) // identifier
		binary.BigEndian.PutUint16(l4[6:], 1)      // sequence
		copy(l4[8:], "xdpshield storm   ")
	default:
		return Template{}, fmt.Errorf("unknown protocol %d", f.Proto)
	}
	l4CsumAt := map[Proto]int{UDP: 6, TCPSYN: 16, TCPSYNOther: 16, TCPSYNExt: 16, ICMP: 2}[f.Proto]
	// Extension headers between the IPv6 header and l4 (RFC 8200 4.6):
	// Destination Options, 8 bytes, a PadN option over the rest.
	var ext []byte
	if f.Proto == TCPSYNExt {
		ext = []byte{ipProto, 0, 1, 4, 0, 0, 0, 0}
	}

	t := Template{Count: f.Count}
	src := f.First.As16()
	t.Base = binary.BigEndian.Uint32(src[f.wordOff():])
	clear(src[f.wordOff() : f.wordOff()+4]) // written per frame
	eth := make([]byte, 14)
	copy(eth[0:], dstMAC)
	copy(eth[6:], srcMAC)

	var ip []byte
	var pseudo []byte
	if f.First.Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8] = 64
		ip[9] = ipProto
		d := dst.As4()
		copy(ip[16:], d[:])
		t.AddrOff = 14 + 12
		t.IPCsumOff = 14 + 10
		t.IPCsumBase = sum16(ip) // source and checksum still zero
		pseudo = make([]byte, 12)
		copy(pseudo[4:], d[:])
		pseudo[9] = ipProto
		binary.BigEndian.PutUint16(pseudo[10:], uint16(len(l4)))
		if f.Proto != ICMP { // ICMPv4 has no pseudo-header
			t.L4CsumOff = 14 + 20 + l4CsumAt
			t.L4CsumBase = sum16(pseudo) + sum16(l4)
		} else {
			binary.LittleEndian.PutUint16(l4[l4CsumAt:], fold(sum16(l4)))
		}
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ext)+len(l4)))
		ip[6] = ipProto
		if ext != nil {
			ip[6] = 60 // Destination Options
		}
		ip[7] = 64
		copy(ip[8:24], src[:]) // the fixed part of the source
		d := dst.As16()
		copy(ip[24:], d[:])
		t.AddrOff = 14 + 8 + f.wordOff()
		pseudo = make([]byte, 40)
		copy(pseudo[0:16], src[:])
		copy(pseudo[16:], d[:])
		binary.BigEndian.PutUint32(pseudo[32:], uint32(len(l4)))
		pseudo[39] = ipProto
		t.L4CsumOff = 14 + 40 + len(ext) + l4CsumAt
		t.L4CsumBase = sum16(pseudo) + sum16(l4)
	}
	t.Frame = append(append(append(eth, ip...), ext...), l4...)
	// The frame as sent for the first source, so a template is a valid
	// packet on its own.
	t.Rewrite(t.Frame, 0)
	return t, nil
}

// Rewrite writes source number i (modulo Count) and the checksums into
// frame, the way bpf/storm.c does; the AF_PACKET generator and the tests use it.
func (t *Template) Rewrite(frame []byte, i uint64) {
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], t.Base+uint32(i%uint64(max(t.Count, 1))))
	copy(frame[t.AddrOff:], a[:])
	words := uint32(binary.LittleEndian.Uint16(a[0:])) + uint32(binary.LittleEndian.Uint16(a[2:]))
	if t.IPCsumOff != 0 {
		binary.LittleEndian.PutUint16(frame[t.IPCsumOff:], fold(t.IPCsumBase+words))
	}
	if t.L4CsumOff != 0 {
		c := fold(t.L4CsumBase + words)
		if c == 0 {
			c = 0xffff
		}
		binary.LittleEndian.PutUint16(frame[t.L4CsumOff:], c)
	}
}

// sum16 is the ones' complement sum (unfolded) of b's native-order 16-bit words.
func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.LittleEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1])
	}
	return s
}

func fold(s uint32) uint16 {
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return ^uint16(s)
}
