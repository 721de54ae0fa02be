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
)

func (l L4) String() string { return [...]string{"udp", "tcp", "icmp"}[l] }

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
		case ICMP:
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
		case ICMP:
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
		tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: true, Seq: 1, Window: 65535}
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
	return buf.Bytes(), nil
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
