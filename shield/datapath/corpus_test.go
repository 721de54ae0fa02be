package datapath

import (
	"fmt"

	"github.com/google/gopacket/layers"

	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/sim"
)

// bad is a frame the shield must pass untouched, and the reason it must give.
type bad struct {
	name   string
	frame  []byte
	reason counter.Reason
}

// wellFormed lists one frame per family, tagging and transport.
func wellFormed() []sim.Frame {
	var out []sim.Frame
	for _, src := range []string{"198.18.7.1", "2001:db8:7::1"} {
		for _, tags := range [][]sim.Tag{nil, sim.Single, sim.Double} {
			for _, l4 := range []sim.L4{sim.TCP, sim.UDP, sim.ICMP} {
				out = append(out, sim.From(src, l4, tags...))
			}
		}
	}
	return out
}

// badCorpus generates malformed and non-IP frames: every truncation of every
// well-formed frame short of the end of its IP header, corrupted IP versions
// and header lengths, unknown EtherTypes and too many VLAN tags. Frames
// shorter than an Ethernet header are left out: the kernel's test runner
// refuses them before the program runs (see MinFrame).
func badCorpus() []bad {
	var out []bad
	for _, f := range wellFormed() {
		b := f.Bytes()
		id := fmt.Sprintf("%s/%d-tags/%s", f.Src, len(f.Tags), f.L4)
		for n := sim.MinFrame; n < f.IPEnd(); n++ {
			out = append(out, bad{fmt.Sprintf("%s/truncated-%d", id, n), b[:n], counter.ReasonMalformed})
		}
		ip := f.IPOffset()
		for _, v := range []byte{0, 1, 5, 7, 15} {
			c := clone(b)
			c[ip] = v<<4 | c[ip]&0x0f
			out = append(out, bad{fmt.Sprintf("%s/version-%d", id, v), c, counter.ReasonMalformed})
		}
		if f.Src.Is4() {
			c := clone(b)
			c[ip] = 6<<4 | 5 // an IPv6 version in an IPv4 EtherType
			out = append(out, bad{id + "/version-6", c, counter.ReasonMalformed})
			for ihl := byte(0); ihl < 16; ihl++ {
				if ihl >= 5 && ip+int(ihl)*4 <= len(b) {
					continue // a valid header length for this frame
				}
				c := clone(b)
				c[ip] = 4<<4 | ihl
				out = append(out, bad{fmt.Sprintf("%s/ihl-%d", id, ihl), c, counter.ReasonMalformed})
			}
		} else {
			c := clone(b)
			c[ip] = 4<<4 | 5 // an IPv4 header in an IPv6 EtherType
			out = append(out, bad{id + "/version-4", c, counter.ReasonMalformed})
		}
		// A third tag: the shield reads two, then sees a VLAN EtherType.
		if len(f.Tags) == 2 {
			t3 := sim.Frame{Src: f.Src, Dst: f.Dst, L4: f.L4, Tags: append(append([]sim.Tag{}, f.Tags...), sim.Tag{TPID: layers.EthernetTypeDot1Q, VID: 300})}
			out = append(out, bad{id + "/three-tags", t3.Bytes(), counter.ReasonNotIP})
		}
	}
	for _, et := range []layers.EthernetType{
		layers.EthernetTypeARP, layers.EthernetTypeLinkLayerDiscovery, 0x8137, 0x0000, 0xffff, 0x0600,
	} {
		out = append(out,
			bad{fmt.Sprintf("ethertype-%#04x/empty", uint16(et)), sim.Raw(et, nil), counter.ReasonNotIP},
			bad{fmt.Sprintf("ethertype-%#04x/28-bytes", uint16(et)), sim.Raw(et, make([]byte, 28)), counter.ReasonNotIP},
			bad{fmt.Sprintf("ethertype-%#04x/tagged", uint16(et)), sim.Raw(layers.EthernetTypeDot1Q, []byte{0, 100, byte(et >> 8), byte(et)}), counter.ReasonNotIP},
		)
	}
	// An 802.1ad tag whose inner tag is cut off, and an empty tagged frame.
	out = append(out,
		bad{"qinq/inner-cut", sim.Raw(layers.EthernetTypeQinQ, []byte{0, 200, 0x81, 0x00, 0, 100}), counter.ReasonMalformed},
		bad{"dot1q/empty", sim.Raw(layers.EthernetTypeDot1Q, nil), counter.ReasonMalformed},
	)
	return out
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
