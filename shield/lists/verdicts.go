package lists

import (
	"net/netip"

	"github.com/xdpshield/xdpshield/bpf"
)

// Verdicts in the verdict tries: LIST_* in bpf/shield.c, as bpf2go emits
// them. The low bits are the verdict the program reads; inAllow and inDeny
// record the lists themselves.
const (
	VerdictAllow = uint8(bpf.ShieldListVerdictLIST_ALLOW)
	VerdictDeny  = uint8(bpf.ShieldListVerdictLIST_DENY)
	VerdictOwn   = uint8(bpf.ShieldListVerdictLIST_OWN)
	VerdictMask  = uint8(bpf.ShieldListVerdictLIST_VERDICT)
	InAllow      = uint8(bpf.ShieldListVerdictLIST_IN_ALLOW)
	InDeny       = uint8(bpf.ShieldListVerdictLIST_IN_DENY)
)

// Want is what the verdict tries must hold for the two lists: every
// prefix of either, valued allow when an allow prefix contains it (itself
// included), deny otherwise, with inAllow and inDeny saying which lists
// hold the prefix itself (the record of the lists). The program looks up an address's longest
// match; every listed prefix containing the address contains that match, so
// this gives "allow wins over deny" at any prefix length. Own addresses
// (host prefixes, the longest match of themselves) are valued own whatever
// covers them.
func Want(allow, deny []netip.Prefix, own ...netip.Addr) map[netip.Prefix]uint8 {
	allowed := make(map[netip.Prefix]bool, len(allow))
	out := make(map[netip.Prefix]uint8, len(allow)+len(deny))
	for _, p := range allow {
		allowed[p] = true
		out[p] = VerdictAllow | InAllow
	}
	for _, p := range deny {
		if out[p] != 0 {
			out[p] |= InDeny
			continue
		}
		out[p] = VerdictDeny | InDeny
		for b := range p.Bits() {
			if allowed[netip.PrefixFrom(p.Addr(), b).Masked()] {
				out[p] = VerdictAllow | InDeny
				break
			}
		}
	}
	for _, a := range own {
		p := netip.PrefixFrom(a, a.BitLen())
		out[p] = out[p]&^VerdictMask | VerdictOwn
	}
	return out
}

// RegionWords mirrors REGION_WORDS in bpf/shield.c.
const RegionWords = 65536 / 64

// Regions are the region bitmaps of the configuration (regions4 and
// regions6 in bpf/shield.c): the bit of every region (an IPv4 address's
// first 16 bits, an IPv6 address's bits 16 to 31) that a prefix of the
// verdict tries covers in part or whole. A region the bitmap leaves out
// holds no listed address, so the program skips the trie lookup there.
// The own addresses the tries hold are host prefixes.
func Regions(prefixes []netip.Prefix, own []netip.Addr) (v4, v6 [RegionWords]uint64) {
	set := func(bits *[RegionWords]uint64, from, n uint32) {
		for r := from; r < from+n; r++ {
			bits[r>>6] |= 1 << (r & 63)
		}
	}
	for _, a := range own {
		prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
	}
	for _, p := range prefixes {
		b := p.Addr().AsSlice()
		if p.Addr().Is4() {
			// Region = bits 0-15: a prefix of L < 16 bits spans 2^(16-L).
			from := uint32(b[0])<<8 | uint32(b[1])
			set(&v4, from, 1<<max(16-p.Bits(), 0))
			continue
		}
		// Region = bits 16-31: a prefix under 16 bits spans them all,
		// one of L in [16, 32) spans 2^(32-L) of them.
		if p.Bits() < 16 {
			set(&v6, 0, 65536)
			continue
		}
		from := uint32(b[2])<<8 | uint32(b[3])
		set(&v6, from, 1<<max(32-p.Bits(), 0))
	}
	return v4, v6
}
