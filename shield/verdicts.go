package shield

import (
	"fmt"
	"maps"
	"net/netip"

	"github.com/xdpshield/xdpshield/bpf"
)

// Verdicts in the verdict tries: LIST_* in bpf/shield.c, as bpf2go emits
// them. The low bits are the verdict the program reads; inAllow and inDeny
// record the lists themselves.
const (
	verdictAllow = uint8(bpf.ShieldListVerdictLIST_ALLOW)
	verdictDeny  = uint8(bpf.ShieldListVerdictLIST_DENY)
	verdictOwn   = uint8(bpf.ShieldListVerdictLIST_OWN)
	verdictMask  = uint8(bpf.ShieldListVerdictLIST_VERDICT)
	inAllow      = uint8(bpf.ShieldListVerdictLIST_IN_ALLOW)
	inDeny       = uint8(bpf.ShieldListVerdictLIST_IN_DENY)
)

// verdictTries are the tries of verdict generation gen: 0 is lists4 and
// lists6, 1 lists4_b and lists6_b (CONFIG_LISTS_B).
func (s *Shield) verdictTries(gen uint32) (v4, v6 trie) {
	if gen == 1 {
		return trie{m: s.objs.Lists4B}, trie{m: s.objs.Lists6B, v6: true}
	}
	return trie{m: s.objs.Lists4}, trie{m: s.objs.Lists6, v6: true}
}

// wantVerdicts is what the verdict tries must hold for the two lists: every
// prefix of either, valued allow when an allow prefix contains it (itself
// included), deny otherwise, with inAllow and inDeny saying which lists
// hold the prefix itself (the record of the lists). The program looks up an address's longest
// match; every listed prefix containing the address contains that match, so
// this gives "allow wins over deny" at any prefix length. Own addresses
// (host prefixes, the longest match of themselves) are valued own whatever
// covers them.
func wantVerdicts(allow, deny []netip.Prefix, own ...netip.Addr) map[netip.Prefix]uint8 {
	allowed := make(map[netip.Prefix]bool, len(allow))
	out := make(map[netip.Prefix]uint8, len(allow)+len(deny))
	for _, p := range allow {
		allowed[p] = true
		out[p] = verdictAllow | inAllow
	}
	for _, p := range deny {
		if out[p] != 0 {
			out[p] |= inDeny
			continue
		}
		out[p] = verdictDeny | inDeny
		for b := range p.Bits() {
			if allowed[netip.PrefixFrom(p.Addr(), b).Masked()] {
				out[p] = verdictAllow | inDeny
				break
			}
		}
	}
	for _, a := range own {
		p := netip.PrefixFrom(a, a.BitLen())
		out[p] = out[p]&^verdictMask | verdictOwn
	}
	return out
}

// readEntries returns what verdict generation gen holds.
func (s *Shield) readEntries(gen uint32) (map[netip.Prefix]bpf.ShieldListValue, error) {
	out := map[netip.Prefix]bpf.ShieldListValue{}
	put := func(p netip.Prefix, v bpf.ShieldListValue) { out[p] = v }
	v4, v6 := s.verdictTries(gen)
	if err := v4.eachEntry(put); err != nil {
		return nil, fmt.Errorf("read IPv4 verdicts: %w", err)
	}
	if err := v6.eachEntry(put); err != nil {
		return nil, fmt.Errorf("read IPv6 verdicts: %w", err)
	}
	return out, nil
}

// readVerdicts returns the verdicts (LIST_* | LIST_IN_*) of generation gen.
func (s *Shield) readVerdicts(gen uint32) (map[netip.Prefix]uint8, error) {
	es, err := s.readEntries(gen)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Prefix]uint8, len(es))
	for p, v := range es {
		out[p] = v.Verdict
	}
	return out, nil
}

// loadRules reads the hit counters of the entries in force.
func (s *Shield) loadRules() error {
	es, err := s.readEntries(s.gen)
	if err != nil {
		return err
	}
	rules := make(map[netip.Prefix]uint32, len(es))
	for p, v := range es {
		rules[p] = v.Rule
	}
	s.rules.Store(&rules)
	return nil
}

// settleLists puts the lists of the snapshots, with the own addresses, in
// force when the generation in force holds anything else (own addresses
// changed, or pins of a layout before the generations): a no-op on a
// fresh load and on pins this version wrote.
func (s *Shield) settleLists() error {
	own, err := s.ownLocked()
	if err != nil {
		return err
	}
	allow, _ := s.listLocked(AllowList)
	deny, _ := s.listLocked(DenyList)
	_, looked := ownSplit(own)
	have, err := s.readVerdicts(s.gen)
	if err != nil {
		return err
	}
	if maps.Equal(have, wantVerdicts(allow, deny, looked...)) {
		return nil
	}
	return s.commitLists(allow, deny, own)
}

// regionWords mirrors REGION_WORDS in bpf/shield.c.
const regionWords = 65536 / 64

// regions are the region bitmaps of the configuration (regions4 and
// regions6 in bpf/shield.c): the bit of every region (an IPv4 address's
// first 16 bits, an IPv6 address's bits 16 to 31) that a prefix of the
// verdict tries covers in part or whole. A region the bitmap leaves out
// holds no listed address, so the program skips the trie lookup there.
// The own addresses the tries hold are host prefixes.
func regions(prefixes []netip.Prefix, own []netip.Addr) (v4, v6 [regionWords]uint64) {
	set := func(bits *[regionWords]uint64, from, n uint32) {
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
