package shield

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
)

type trie struct {
	m  *ebpf.Map
	v6 bool
}

func (t trie) key(p netip.Prefix) any {
	if t.v6 {
		return bpf.ShieldLpm6Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
	}
	return bpf.ShieldLpm4Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As4()}
}

// each calls fn for every entry of the trie.
func (t trie) each(fn func(netip.Prefix, uint8)) error {
	var v uint8
	if t.v6 {
		var k bpf.ShieldLpm6Key
		it := t.m.Iterate()
		for it.Next(&k, &v) {
			fn(netip.PrefixFrom(netip.AddrFrom16(k.Addr), int(k.Prefixlen)), v)
		}
		return it.Err()
	}
	var k bpf.ShieldLpm4Key
	it := t.m.Iterate()
	for it.Next(&k, &v) {
		fn(netip.PrefixFrom(netip.AddrFrom4(k.Addr), int(k.Prefixlen)), v)
	}
	return it.Err()
}

// eachEntry calls fn for every entry of a verdict trie.
func (t trie) eachEntry(fn func(netip.Prefix, bpf.ShieldListValue)) error {
	var v bpf.ShieldListValue
	if t.v6 {
		var k bpf.ShieldLpm6Key
		it := t.m.Iterate()
		for it.Next(&k, &v) {
			fn(netip.PrefixFrom(netip.AddrFrom16(k.Addr), int(k.Prefixlen)), v)
		}
		return it.Err()
	}
	var k bpf.ShieldLpm4Key
	it := t.m.Iterate()
	for it.Next(&k, &v) {
		fn(netip.PrefixFrom(netip.AddrFrom4(k.Addr), int(k.Prefixlen)), v)
	}
	return it.Err()
}

func (t trie) list() ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := t.each(func(p netip.Prefix, _ uint8) { out = append(out, p) })
	return out, err
}

// List returns the prefixes of list l, IPv4 first, sorted. It reads a
// snapshot kept beside the tries and takes no lock: however long a caller
// takes over a large list, changes never wait for it.
func (s *Shield) List(l lists.List) ([]netip.Prefix, error) {
	return s.listLocked(l)
}

// listLocked returns the snapshot of list l (a copy of it).
func (s *Shield) listLocked(l lists.List) ([]netip.Prefix, error) {
	if p := s.snap[l].Load(); p != nil {
		return slices.Clone(*p), nil
	}
	return []netip.Prefix{}, nil
}

// loadSnapshots reads both lists from the verdict generation in force
// (their record) into the snapshots List answers from. The service is the
// only writer of the tries (the pin directory's lock), so the snapshots
// stay true once read.
func (s *Shield) loadSnapshots() error {
	allow, deny, err := s.readLists(s.gen)
	if err != nil {
		return err
	}
	s.snap[lists.AllowList].Store(&allow)
	s.snap[lists.DenyList].Store(&deny)
	return nil
}

// readLists reads the two lists from the LIST_IN_* bits of verdict
// generation gen.
func (s *Shield) readLists(gen uint32) (allow, deny []netip.Prefix, err error) {
	vs, err := s.readVerdicts(gen)
	if err != nil {
		return nil, nil, err
	}
	allow, deny = []netip.Prefix{}, []netip.Prefix{}
	for p, v := range vs {
		if v&lists.InAllow != 0 {
			allow = append(allow, p)
		}
		if v&lists.InDeny != 0 {
			deny = append(deny, p)
		}
	}
	lists.SortPrefixes(allow)
	lists.SortPrefixes(deny)
	return allow, deny, nil
}

// listedLocked returns the prefixes of list l as a set.
func (s *Shield) listedLocked(l lists.List) (map[netip.Prefix]bool, error) {
	cur, err := s.listLocked(l)
	if err != nil {
		return nil, err
	}
	have := make(map[netip.Prefix]bool, len(cur))
	for _, p := range cur {
		have[p] = true
	}
	return have, nil
}

// withList returns the two lists with list l replaced by ps.
func (s *Shield) withList(l lists.List, ps []netip.Prefix) (allow, deny []netip.Prefix) {
	allow, _ = s.listLocked(lists.AllowList)
	deny, _ = s.listLocked(lists.DenyList)
	if l == lists.AllowList {
		return ps, deny
	}
	return allow, ps
}

// Add puts prefixes on list l and reports what it added. The batch is
// checked whole (capacity included) before anything is written; if a write
// still fails, what the batch wrote is removed again. Prefixes already
// listed are kept as they are.
func (s *Shield) Add(l lists.List, prefixes []netip.Prefix) (lists.ListChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh, before, err := s.addLocked(l, prefixes)
	if err != nil {
		return lists.ListChange{}, err
	}
	return s.changeLocked(l, fresh, nil, before)
}

// changeLocked reports a change of list l.
func (s *Shield) changeLocked(l lists.List, added, removed []netip.Prefix, before int) (lists.ListChange, error) {
	after, err := s.listLocked(l)
	if err != nil {
		return lists.ListChange{}, err
	}
	lists.SortPrefixes(added)
	lists.SortPrefixes(removed)
	return lists.ListChange{List: l, Added: added, Removed: removed, Before: before, After: after}, nil
}

func (s *Shield) addLocked(l lists.List, prefixes []netip.Prefix) (fresh []netip.Prefix, before int, err error) {
	have, err := s.listedLocked(l)
	if err != nil {
		return nil, 0, err
	}
	before = len(have)
	fresh, err = s.addTo(l, have, prefixes)
	return fresh, before, err
}

func (s *Shield) addTo(l lists.List, have map[netip.Prefix]bool, prefixes []netip.Prefix) ([]netip.Prefix, error) {
	n4, n6 := 0, 0
	var fresh []netip.Prefix
	for _, p := range prefixes {
		if !p.IsValid() || p.Masked() != p || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return nil, config.Invalid(fmt.Errorf("invalid prefix %q", p))
		}
		if have[p] {
			continue
		}
		have[p] = true
		fresh = append(fresh, p)
	}
	for p := range have {
		if p.Addr().Is4() {
			n4++
		} else {
			n6++
		}
	}
	if n4 > lists.MaxEntries || n6 > lists.MaxEntries {
		return nil, config.Invalid(fmt.Errorf("the %s list would hold %d IPv4 and %d IPv6 prefixes; the limit is %d each", l, n4, n6, lists.MaxEntries))
	}

	if len(fresh) == 0 {
		return fresh, nil // nothing new: nothing to put in force
	}
	own, err := s.ownLocked()
	if err != nil {
		return nil, err
	}
	allow, deny := s.withList(l, lists.PrefixesOf(have))
	if err := s.commitLists(allow, deny, own); err != nil {
		return nil, fmt.Errorf("add to %s list: %w", l, err)
	}
	return fresh, nil
}

// Remove takes prefixes off list l (a prefix given twice is removed once)
// and reports what it removed. Every prefix must be listed; otherwise
// nothing is removed.
func (s *Shield) Remove(l lists.List, prefixes []netip.Prefix) (lists.ListChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	have, err := s.listedLocked(l)
	if err != nil {
		return lists.ListChange{}, err
	}
	before := len(have)
	gone, err := s.removeFrom(l, have, prefixes)
	if err != nil {
		return lists.ListChange{}, err
	}
	return s.changeLocked(l, nil, gone, before)
}

func (s *Shield) removeFrom(l lists.List, have map[netip.Prefix]bool, prefixes []netip.Prefix) ([]netip.Prefix, error) {
	var missing []string
	var gone []netip.Prefix
	for _, p := range prefixes {
		if slices.Contains(gone, p) {
			continue
		}
		if !have[p] {
			missing = append(missing, p.String())
			continue
		}
		delete(have, p)
		gone = append(gone, p)
	}
	if len(missing) > 0 {
		return nil, config.Invalid(fmt.Errorf("not on the %s list: %s", l, strings.Join(missing, ", ")))
	}
	own, err := s.ownLocked()
	if err != nil {
		return nil, err
	}
	allow, deny := s.withList(l, lists.PrefixesOf(have))
	if err := s.commitLists(allow, deny, own); err != nil {
		return nil, fmt.Errorf("remove from %s list: %w", l, err)
	}
	return gone, nil
}

// commitLists puts allow, deny and the own addresses own in force at once:
// their verdicts are written whole into the verdict generation not in
// force, which the next configuration (one swap of config_map) names. A
// crash before the swap leaves the old lists in force and on record; after
// it, the new ones: never a mix, and nothing to roll back. On an error
// before the swap nothing in force changed. Callers hold s.mu (or own s
// exclusively).
func (s *Shield) commitLists(allow, deny []netip.Prefix, own []netip.Addr) error {
	_, looked := ownSplit(own)
	next := s.gen ^ 1
	rules, err := s.writeGeneration(next, lists.Want(allow, deny, looked...))
	if err != nil {
		return err
	}
	oldAllow, oldDeny, oldGen := s.snap[lists.AllowList].Load(), s.snap[lists.DenyList].Load(), s.gen
	allow, deny = slices.Clone(allow), slices.Clone(deny)
	lists.SortPrefixes(allow)
	lists.SortPrefixes(deny)
	s.snap[lists.AllowList].Store(&allow)
	s.snap[lists.DenyList].Store(&deny)
	s.gen = next
	if err := s.publishOwn(s.limits, own); err != nil {
		s.snap[lists.AllowList].Store(oldAllow)
		s.snap[lists.DenyList].Store(oldDeny)
		s.gen = oldGen
		return err
	}
	s.rules.Store(&rules)
	return nil
}

// writeGeneration makes verdict generation gen (not in force) hold want,
// each entry with its hit counter (assignRules): entries it holds that
// want does not are deleted, the others written. It returns the entries'
// rules.
func (s *Shield) writeGeneration(gen uint32, want map[netip.Prefix]uint8) (map[netip.Prefix]uint32, error) {
	have, err := s.readEntries(gen)
	if err != nil {
		return nil, err
	}
	rules, err := s.assignRules(want)
	if err != nil {
		return nil, err
	}
	v4, v6 := s.verdictTries(gen)
	pick := func(p netip.Prefix) trie {
		if p.Addr().Is4() {
			return v4
		}
		return v6
	}
	for p := range have {
		if _, ok := want[p]; ok {
			continue
		}
		t := pick(p)
		if err := t.m.Delete(t.key(p)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("delete verdict of %s: %w", p, err)
		}
	}
	for p, v := range want {
		val := bpf.ShieldListValue{Rule: rules[p], Verdict: v}
		if cur, ok := have[p]; ok && cur.Rule == val.Rule && cur.Verdict == val.Verdict {
			continue
		}
		t := pick(p)
		if err := t.m.Put(t.key(p), val); err != nil {
			return nil, fmt.Errorf("write verdict of %s: %w", p, err)
		}
	}
	return rules, nil
}

// maxRules and noRule are MAX_RULES and NO_RULE in bpf/shield.c.
const (
	maxRules = uint32(bpf.ShieldListCapacityMAX_RULES)
	noRule   = uint32(bpf.ShieldListCapacityNO_RULE)
)

// assignRules gives every entry of want its hit counter in rule_counts: an
// entry in force keeps its own, a new one gets the lowest counter no entry
// in force uses (the generation in force may still count into it until
// the swap), zeroed first. Entries beyond maxRules are not counted.
func (s *Shield) assignRules(want map[netip.Prefix]uint8) (map[netip.Prefix]uint32, error) {
	var cur map[netip.Prefix]uint32
	if p := s.rules.Load(); p != nil {
		cur = *p
	}
	out := make(map[netip.Prefix]uint32, len(want))
	used := make(map[uint32]bool, len(cur)+len(want))
	for _, r := range cur {
		used[r] = true
	}
	var fresh []netip.Prefix
	for p := range want {
		if r, ok := cur[p]; ok && r != noRule {
			out[p] = r
			continue
		}
		fresh = append(fresh, p)
	}
	lists.SortPrefixes(fresh)
	var zeroed []uint32
	next := uint32(0)
	for _, p := range fresh {
		for next < maxRules && used[next] {
			next++
		}
		if next >= maxRules {
			out[p] = noRule
			continue
		}
		used[next] = true
		out[p] = next
		zeroed = append(zeroed, next)
	}
	if err := s.hits.zero(zeroed); err != nil {
		return nil, err
	}
	return out, nil
}

// ListHits returns, for every prefix of list l, the packets whose longest
// listed match it was (summed over CPUs) since it was put on the list. A
// prefix on both lists is one entry: both lists show its hits. It takes
// no lock.
func (s *Shield) ListHits(l lists.List) (map[netip.Prefix]uint64, error) {
	ps, err := s.listLocked(l)
	if err != nil {
		return nil, err
	}
	var rules map[netip.Prefix]uint32
	if p := s.rules.Load(); p != nil {
		rules = *p
	}
	rs := make([]uint32, len(ps))
	for i, p := range ps {
		rs[i] = noRule
		if r, ok := rules[p]; ok {
			rs[i] = r
		}
	}
	sums, err := s.hits.sums(rs)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Prefix]uint64, len(ps))
	for i, p := range ps {
		out[p] = sums[i]
	}
	return out, nil
}

// listFlags says which lists and own addresses the program must look up
// in the verdict tries (the lists as their snapshots hold them, and own)
// and which verdict generation is in force.
func (s *Shield) listFlags(own []netip.Addr) uint32 {
	var flags uint32
	_, looked := ownSplit(own)
	for _, a := range looked {
		if a.Is4() {
			flags |= config.FlagOwn4
		} else {
			flags |= config.FlagOwn6
		}
	}
	for _, l := range []lists.List{lists.AllowList, lists.DenyList} {
		f4, f6 := config.FlagAllow4, config.FlagAllow6
		if l == lists.DenyList {
			f4, f6 = config.FlagDeny4, config.FlagDeny6
		}
		if p := s.snap[l].Load(); p != nil {
			for _, q := range *p {
				if q.Addr().Is4() {
					flags |= f4
				} else {
					flags |= f6
				}
			}
		}
	}
	if s.gen == 1 {
		flags |= config.FlagListsB
	}
	return flags
}
