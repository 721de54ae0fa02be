package sim

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// L4 is the transport a built frame carries.
type L4 uint8

const (
	UDP L4 = iota
	TCP
	ICMP // ICMP echo for IPv4, ICMPv6 echo for IPv6
	// Unreachable is an ICMP (v6) destination unreachable, port
	// unreachable, quoting a UDP datagram Dst sent from DstPort to Src's
	// SrcPort: an error about a flow the destination opened.
	Unreachable
)

func (l L4) String() string { return [...]string{"udp", "tcp", "icmp", "unreachable"}[l] }

// Seg is the kind of a TCP segment, by its flags.
type Seg uint8

const (
	SYN    Seg = iota // SYN alone: a connection's first segment
	ACK               // ACK: a segment of an open connection
	SYNACK            // SYN and ACK: the answer to a SYN
)

// Ext is an IPv6 extension header to put before the upper-layer header.
type Ext struct {
	// Type is the header's own next-header value: layers.IPProtocol
	// IPv6HopByHop (0), IPv6Routing (43), IPv6Fragment (44), AH (51),
	// IPv6Destination (60), or any other value written as such a header.
	Type layers.IPProtocol
	// Len is the header's length in bytes: a multiple of 8 from 8 to
	// 2048 (of 4 from 8 to 1028 for AH; a fragment header is 8).
	Len int
	// Offset and More are a fragment header's offset (8-byte units) and M
	// flag; ID its identification.
	Offset uint16
	More   bool
}

// HdrLen is the Hdr Ext Len byte that says e's length (RFC 8200 4.3,
// RFC 4302 2.2); a fragment header has a reserved byte there.
func (e Ext) HdrLen() byte {
	switch e.Type {
	case layers.IPProtocolIPv6Fragment:
		return 0
	case layers.IPProtocolAH:
		return byte(e.Len/4 - 2)
	}
	return byte(e.Len/8 - 1)
}

// Tag is one VLAN tag; TPID is layers.EthernetTypeDot1Q (802.1Q) or
// layers.EthernetTypeQinQ (802.1ad, the outer tag of a double-tagged frame).
type Tag struct {
	TPID layers.EthernetType
	VID  uint16
}

// Frame describes a frame to build. The zero values of the ports and MACs
// are filled with fixed defaults, so equal descriptions build equal bytes.
type Frame struct {
	Src, Dst netip.Addr
	L4       L4
	Tags     []Tag // outermost first
	SrcPort  uint16
	DstPort  uint16
	Seg      Seg   // TCP: the segment's kind (default SYN)
	Ext      []Ext // IPv6: extension headers, outermost first
	Payload  []byte
}

// Single and Double are the VLAN taggings the shield must see through.
var (
	Single = []Tag{{layers.EthernetTypeDot1Q, 100}}
	Double = []Tag{{layers.EthernetTypeQinQ, 200}, {layers.EthernetTypeDot1Q, 100}}
)

var (
	srcMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	dstMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
)

// From describes a frame from src (an IPv4 or IPv6 address) to a fixed
// benchmarking address of the same family, tagged with tags.
func From(src string, l4 L4, tags ...Tag) Frame {
	s := netip.MustParseAddr(src)
	d := netip.MustParseAddr("198.18.255.254")
	if s.Is6() {
		d = netip.MustParseAddr("2001:db8:ffff::fffe")
	}
	return Frame{Src: s, Dst: d, L4: l4, Tags: tags}
}

// Bytes serialises f, computing lengths and checksums; it panics on a
// description gopacket cannot serialise (a programming error in a test).
func (f Frame) Bytes() []byte {
	b, err := f.Build()
	if err != nil {
		panic(err)
	}
	return b
}

// Build serialises f.
func (f Frame) Build() ([]byte, error) {
	if f.Src.Is4() != f.Dst.Is4() {
		return nil, fmt.Errorf("build frame: %s and %s are of different families", f.Src, f.Dst)
	}
	ipType := layers.EthernetTypeIPv4
	if !f.Src.Is4() {
		ipType = layers.EthernetTypeIPv6
	}
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: ipType}
	ls = append(ls, eth)
	for i, t := range f.Tags {
		if i == 0 {
			eth.EthernetType = t.TPID
		}
		next := ipType
		if i+1 < len(f.Tags) {
			next = f.Tags[i+1].TPID
		}
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: t.VID, Type: next})
	}

	var netLayer gopacket.NetworkLayer
	if f.Src.Is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, SrcIP: f.Src.AsSlice(), DstIP: f.Dst.AsSlice()}
		switch f.L4 {
		case TCP:
			ip.Protocol = layers.IPProtocolTCP
		case UDP:
			ip.Protocol = layers.IPProtocolUDP
		case ICMP, Unreachable:
			ip.Protocol = layers.IPProtocolICMPv4
		}
		netLayer = ip
		ls = append(ls, ip)
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: f.Src.AsSlice(), DstIP: f.Dst.AsSlice()}
		switch f.L4 {
		case TCP:
			ip.NextHeader = layers.IPProtocolTCP
		case UDP:
			ip.NextHeader = layers.IPProtocolUDP
		case ICMP, Unreachable:
			ip.NextHeader = layers.IPProtocolICMPv6
		}
		netLayer = ip
		ls = append(ls, ip)
	}

	sport, dport := f.SrcPort, f.DstPort
	if sport == 0 {
		sport = 40000
	}
	if dport == 0 {
		dport = 443
	}
	switch f.L4 {
	case TCP:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: f.Seg != ACK, ACK: f.Seg != SYN, Seq: 1, Window: 65535}
		if err := tcp.SetNetworkLayerForChecksum(netLayer); err != nil {
			return nil, err
		}
		ls = append(ls, tcp)
	case UDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
		if err := udp.SetNetworkLayerForChecksum(netLayer); err != nil {
			return nil, err
		}
		ls = append(ls, udp)
	case ICMP:
		if f.Src.Is4() {
			ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 1, Seq: 1})
		} else {
			icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
			if err := icmp.SetNetworkLayerForChecksum(netLayer); err != nil {
				return nil, err
			}
			ls = append(ls, icmp, &layers.ICMPv6Echo{Identifier: 1, SeqNumber: 1})
		}
	case Unreachable:
		// The quoted datagram: Dst's, from DstPort to Src's SrcPort.
		quoted, err := Frame{Src: f.Dst, Dst: f.Src, L4: UDP, SrcPort: dport, DstPort: sport, Payload: []byte{}}.Build()
		if err != nil {
			return nil, err
		}
		quoted = quoted[14:]
		if f.Src.Is4() {
			ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodePort)})
		} else {
			icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, layers.ICMPv6CodePortUnreachable)}
			if err := icmp.SetNetworkLayerForChecksum(netLayer); err != nil {
				return nil, err
			}
			quoted = append([]byte{0, 0, 0, 0}, quoted...) // unused
			ls = append(ls, icmp)
		}
		if f.Payload == nil {
			f.Payload = quoted
		}
	default:
		return nil, fmt.Errorf("build frame: unknown L4 %d", f.L4)
	}
	payload := f.Payload
	if payload == nil {
		payload = []byte("xdpshield")
	}
	ls = append(ls, gopacket.Payload(payload))

	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return nil, fmt.Errorf("build frame: %w", err)
	}
	b := buf.Bytes()
	if len(f.Ext) > 0 {
		if f.Src.Is4() {
			return nil, fmt.Errorf("build frame: extension headers in IPv4")
		}
		return f.withExt(b)
	}
	return b, nil
}

// withExt puts f's extension headers between the IPv6 header and the
// upper-layer header of b, f built without them; the upper layer's
// checksum stays right (its pseudo-header does not cover them).
func (f Frame) withExt(b []byte) ([]byte, error) {
	ip := f.IPOffset()
	var ext []byte
	next := b[ip+6]
	for i := len(f.Ext) - 1; i >= 0; i-- {
		e := f.Ext[i]
		h := make([]byte, e.Len)
		switch {
		case e.Type == layers.IPProtocolIPv6Fragment && e.Len != 8,
			e.Type == layers.IPProtocolAH && (e.Len < 8 || e.Len > 1028 || e.Len%4 != 0),
			e.Type != layers.IPProtocolAH && (e.Len < 8 || e.Len > 2048 || e.Len%8 != 0):
			return nil, fmt.Errorf("build frame: extension header %v of %d bytes", e.Type, e.Len)
		}
		h[0], h[1] = next, e.HdrLen()
		switch e.Type {
		case layers.IPProtocolIPv6Fragment:
			fo := e.Offset << 3
			if e.More {
				fo |= 1
			}
			h[2], h[3] = byte(fo>>8), byte(fo)
			h[4], h[5], h[6], h[7] = 0x5e, 0xd0, 0x00, byte(i) // identification
		case layers.IPProtocolIPv6HopByHop, layers.IPProtocolIPv6Destination:
			// Padding over the rest (RFC 8200 4.2): PadN options of
			// at most 255 bytes of data, a Pad1 (a zero) for a last byte.
			for o := 2; o < e.Len; {
				r := e.Len - o
				if r == 1 {
					break
				}
				n := min(r-2, 255)
				h[o], h[o+1] = 1, byte(n)
				o += n + 2
			}
		case layers.IPProtocolIPv6Routing:
			h[2] = 4 // Segment Routing (RFC 8754), segments left 0
		}
		ext = append(h, ext...)
		next = byte(e.Type)
	}
	out := make([]byte, 0, len(b)+len(ext))
	out = append(out, b[:ip+40]...)
	out = append(out, ext...)
	out = append(out, b[ip+40:]...)
	out[ip+6] = next
	pl := int(out[ip+4])<<8 | int(out[ip+5]) + len(ext)
	out[ip+4], out[ip+5] = byte(pl>>8), byte(pl)
	return out, nil
}

// IPOffset is where the IP header of f's bytes starts.
func (f Frame) IPOffset() int { return 14 + 4*len(f.Tags) }

// IPEnd is where the IP header of f's bytes ends (no options, no extension
// headers): the shortest length the shield parses as IP.
func (f Frame) IPEnd() int {
	if f.Src.Is4() {
		return f.IPOffset() + 20
	}
	return f.IPOffset() + 40
}

// Raw builds an Ethernet frame of the given EtherType around payload, for
// non-IP and hand-made malformed frames.
func Raw(etherType layers.EthernetType, payload []byte) []byte {
	b := make([]byte, 14+len(payload))
	copy(b, dstMAC)
	copy(b[6:], srcMAC)
	b[12], b[13] = byte(etherType>>8), byte(etherType)
	copy(b[14:], payload)
	return b
}
