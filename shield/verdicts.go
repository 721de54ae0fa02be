package shield

import (
	"fmt"
	"maps"
	"net/netip"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// verdictTries are the tries of verdict generation gen: 0 is lists4 and
// lists6, 1 lists4_b and lists6_b (CONFIG_LISTS_B).
func (s *Shield) verdictTries(gen uint32) (v4, v6 trie) {
	if gen == 1 {
		return trie{m: s.objs.Lists4B}, trie{m: s.objs.Lists6B, v6: true}
	}
	return trie{m: s.objs.Lists4}, trie{m: s.objs.Lists6, v6: true}
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
	allow, _ := s.listLocked(lists.AllowList)
	deny, _ := s.listLocked(lists.DenyList)
	_, looked := ownSplit(own)
	have, err := s.readVerdicts(s.gen)
	if err != nil {
		return err
	}
	if maps.Equal(have, lists.Want(allow, deny, looked...)) {
		return nil
	}
	return s.commitLists(allow, deny, own)
}
