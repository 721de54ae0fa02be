package shield

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
)

// List names an address list.
type List uint8

const (
	AllowList List = iota // never limited; wins over the deny list
	DenyList              // always dropped
)

func (l List) String() string {
	if l == AllowList {
		return "allow"
	}
	return "deny"
}

// ErrInvalid marks the errors of Add and Remove that their input caused (a
// bad prefix, a list over capacity, a prefix not listed): nothing changed.
var ErrInvalid = errors.New("invalid list change")

// inputError is an error that errors.Is(err, ErrInvalid), with its own text.
type inputError struct{ error }

func (inputError) Is(target error) bool { return target == ErrInvalid }

// maxListEntries is MAX_LIST_ENTRIES in bpf/shield.c (per list and family).
const maxListEntries = int(bpf.ShieldListCapacityMAX_LIST_ENTRIES)

// ParsePrefixes parses CIDRs or bare addresses (taken as /32 or /128). It
// reports every bad entry, names them, and returns nothing when any is bad.
// Host bits must be zero: "198.18.0.1/16" is an error, not a silent mask.
func ParsePrefixes(ss []string) ([]netip.Prefix, error) {
	var errs []error
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		p, err := parsePrefix(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q: zones are not allowed", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q: write IPv4-mapped prefixes as IPv4", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

type trie struct {
	m    *ebpf.Map
	flag uint32
	v6   bool
}

func (s *Shield) tries(l List) (v4, v6 trie) {
	if l == AllowList {
		return trie{s.objs.Allow4, flagAllow4, false}, trie{s.objs.Allow6, flagAllow6, true}
	}
	return trie{s.objs.Deny4, flagDeny4, false}, trie{s.objs.Deny6, flagDeny6, true}
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

func (t trie) list() ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := t.each(func(p netip.Prefix, _ uint8) { out = append(out, p) })
	return out, err
}

// List returns the prefixes of list l, IPv4 first, sorted. It reads a
// snapshot kept beside the tries and takes no lock: however long a caller
// takes over a large list, changes never wait for it.
func (s *Shield) List(l List) ([]netip.Prefix, error) {
	return s.listLocked(l)
}

// listLocked returns the snapshot of list l (a copy of it).
func (s *Shield) listLocked(l List) ([]netip.Prefix, error) {
	if p := s.snap[l].Load(); p != nil {
		return slices.Clone(*p), nil
	}
	return s.readList(l)
}

// loadSnapshots reads both lists from their tries into the snapshots List
// answers from. The service is the only writer of the tries (the pin
// directory's lock), so the snapshots stay true once read.
func (s *Shield) loadSnapshots() error {
	for _, l := range []List{AllowList, DenyList} {
		ps, err := s.readList(l)
		if err != nil {
			return err
		}
		s.snap[l].Store(&ps)
	}
	return nil
}

// setSnapshot makes the prefixes of have list l's snapshot.
func (s *Shield) setSnapshot(l List, have map[netip.Prefix]bool) {
	ps := make([]netip.Prefix, 0, len(have))
	for p := range have {
		ps = append(ps, p)
	}
	sortPrefixes(ps)
	s.snap[l].Store(&ps)
}

func sortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
}

// readList reads list l from its tries.
func (s *Shield) readList(l List) ([]netip.Prefix, error) {
	v4, v6 := s.tries(l)
	a, err := v4.list()
	if err != nil {
		return nil, fmt.Errorf("list %s (IPv4): %w", l, err)
	}
	b, err := v6.list()
	if err != nil {
		return nil, fmt.Errorf("list %s (IPv6): %w", l, err)
	}
	out := append(a, b...)
	sortPrefixes(out)
	return out, nil
}

// listedLocked returns the prefixes of list l as a set.
func (s *Shield) listedLocked(l List) (map[netip.Prefix]bool, error) {
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

// ListChange is what one Add or Remove did, read under the same lock as
// the change, so racing changes each report their own prefixes.
type ListChange struct {
	List    List
	Added   []netip.Prefix // put on the list by this change (Add), sorted
	Removed []netip.Prefix // taken off by this change (Remove), sorted
	Before  int            // prefixes on the list before the change
	After   []netip.Prefix // the list after the change, as List returns it
}

// Add puts prefixes on list l and reports what it added. The batch is
// checked whole (capacity included) before anything is written; if a write
// still fails, what the batch wrote is removed again. Prefixes already
// listed are kept as they are.
func (s *Shield) Add(l List, prefixes []netip.Prefix) (ListChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh, before, err := s.addLocked(l, prefixes)
	if err != nil {
		return ListChange{}, err
	}
	return s.changeLocked(l, fresh, nil, before)
}

// changeLocked reports a change of list l.
func (s *Shield) changeLocked(l List, added, removed []netip.Prefix, before int) (ListChange, error) {
	after, err := s.listLocked(l)
	if err != nil {
		return ListChange{}, err
	}
	sortPrefixes(added)
	sortPrefixes(removed)
	return ListChange{List: l, Added: added, Removed: removed, Before: before, After: after}, nil
}

func (s *Shield) addLocked(l List, prefixes []netip.Prefix) (fresh []netip.Prefix, before int, err error) {
	have, err := s.listedLocked(l)
	if err != nil {
		return nil, 0, err
	}
	before = len(have)
	fresh, err = s.addTo(l, have, prefixes)
	return fresh, before, err
}

func (s *Shield) addTo(l List, have map[netip.Prefix]bool, prefixes []netip.Prefix) ([]netip.Prefix, error) {
	n4, n6 := 0, 0
	var fresh []netip.Prefix
	for _, p := range prefixes {
		if !p.IsValid() || p.Masked() != p || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return nil, inputError{fmt.Errorf("invalid prefix %q", p)}
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
	if n4 > maxListEntries || n6 > maxListEntries {
		return nil, inputError{fmt.Errorf("the %s list would hold %d IPv4 and %d IPv6 prefixes; the limit is %d each", l, n4, n6, maxListEntries)}
	}

	// The intent first: a crash from here on is rolled back at the next
	// load, so the batch is in force whole or not at all.
	j, err := s.beginJournal(l, journalAdded, fresh)
	if err != nil {
		return nil, err
	}
	v4, v6 := s.tries(l)
	one := uint8(1)
	for i, p := range fresh {
		t := v4
		if !p.Addr().Is4() {
			t = v6
		}
		if err := t.m.Put(t.key(p), one); err != nil {
			if s.removeLocked(l, fresh[:i]) == nil {
				j.commit()
			}
			return nil, fmt.Errorf("add %s to %s list: %w", p, l, err)
		}
	}
	old := s.snap[l].Load()
	s.setSnapshot(l, have)
	if err := s.syncVerdicts(); err != nil {
		err2 := s.removeLocked(l, fresh)
		s.snap[l].Store(old)
		if err2 == nil {
			err2 = s.syncVerdicts()
		}
		if err2 == nil {
			err2 = s.republish()
		}
		if err2 != nil {
			err = errors.Join(err, fmt.Errorf("undo: %w", err2))
		} else {
			j.commit()
		}
		return nil, fmt.Errorf("add to %s list: %w", l, err)
	}
	// Entries first, then the flag that makes the program look them up.
	if err := s.publish(s.limits); err != nil {
		return nil, err
	}
	if err := j.commit(); err != nil {
		return nil, err
	}
	return fresh, nil
}

// Remove takes prefixes off list l (a prefix given twice is removed once)
// and reports what it removed. Every prefix must be listed; otherwise
// nothing is removed.
func (s *Shield) Remove(l List, prefixes []netip.Prefix) (ListChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	have, err := s.listedLocked(l)
	if err != nil {
		return ListChange{}, err
	}
	before := len(have)
	gone, err := s.removeFrom(l, have, prefixes)
	if err != nil {
		return ListChange{}, err
	}
	return s.changeLocked(l, nil, gone, before)
}

func (s *Shield) removeFrom(l List, have map[netip.Prefix]bool, prefixes []netip.Prefix) ([]netip.Prefix, error) {
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
		return nil, inputError{fmt.Errorf("not on the %s list: %s", l, strings.Join(missing, ", "))}
	}
	// The flag goes first when a trie empties, then the entries.
	flags, err := s.flagsWith(l, have)
	if err != nil {
		return nil, err
	}
	j, err := s.beginJournal(l, journalRemoved, gone)
	if err != nil {
		return nil, err
	}
	if err := s.publishFlags(s.limits, flags); err != nil {
		return nil, err
	}
	if err := s.removeLocked(l, gone); err != nil {
		s.loadSnapshots()
		return nil, err
	}
	s.setSnapshot(l, have)
	if err := s.syncVerdicts(); err != nil {
		return nil, err
	}
	if err := s.republish(); err != nil {
		return nil, err
	}
	if err := j.commit(); err != nil {
		return nil, err
	}
	return gone, nil
}

func (s *Shield) removeLocked(l List, prefixes []netip.Prefix) error {
	v4, v6 := s.tries(l)
	var errs []error
	for _, p := range prefixes {
		t := v4
		if !p.Addr().Is4() {
			t = v6
		}
		if err := t.m.Delete(t.key(p)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("remove %s from %s list: %w", p, l, err))
		}
	}
	return errors.Join(errs...)
}

// flagsWith computes the list flags as they will be once list l holds
// exactly `remaining`.
func (s *Shield) flagsWith(l List, remaining map[netip.Prefix]bool) (uint32, error) {
	flags, err := s.listFlags()
	if err != nil {
		return 0, err
	}
	v4, v6 := s.tries(l)
	flags &^= v4.flag | v6.flag
	for p := range remaining {
		if p.Addr().Is4() {
			flags |= v4.flag
		} else {
			flags |= v6.flag
		}
	}
	return flags, nil
}

// listFlags says which tries hold entries.
func (s *Shield) listFlags() (uint32, error) {
	var flags uint32
	own, err := s.ownLocked()
	if err != nil {
		return 0, err
	}
	_, looked := ownSplit(own)
	for _, a := range looked {
		if a.Is4() {
			flags |= flagOwn4
		} else {
			flags |= flagOwn6
		}
	}
	for _, l := range []List{AllowList, DenyList} {
		v4, v6 := s.tries(l)
		for _, t := range []trie{v4, v6} {
			var k []byte
			if err := t.m.NextKey(nil, &k); err == nil {
				flags |= t.flag
			} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
				return 0, fmt.Errorf("inspect %s list: %w", l, err)
			}
		}
	}
	return flags, nil
}

func (s *Shield) ownTries() (v4, v6 trie) {
	return trie{s.objs.Own4Addrs, flagOwn4, false}, trie{s.objs.Own6Addrs, flagOwn6, true}
}

// ownInline is OWN_INLINE in bpf/shield.c: the config's inline own
// addresses per family.
const ownInline = len(bpf.ShieldConfig{}.Own4)

// ownSplit returns the own addresses the program compares inline (a family
// of at most ownInline) and those it finds in the verdict tries (a family
// of more).
func ownSplit(own []netip.Addr) (inline, looked []netip.Addr) {
	var v4, v6 []netip.Addr
	for _, a := range own {
		if a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	for _, fam := range [][]netip.Addr{v4, v6} {
		if len(fam) <= ownInline {
			inline = append(inline, fam...)
		} else {
			looked = append(looked, fam...)
		}
	}
	return inline, looked
}

// maxOwn is MAX_OWN_ENTRIES in bpf/shield.c (per family).
const maxOwn = int(bpf.ShieldListCapacityMAX_OWN_ENTRIES)

// Own returns the machine's own addresses as SetOwn last wrote them.
func (s *Shield) Own() ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ownLocked()
}

func (s *Shield) ownLocked() ([]netip.Addr, error) {
	var out []netip.Addr
	v4, v6 := s.ownTries()
	for _, t := range []trie{v4, v6} {
		ps, err := t.list()
		if err != nil {
			return nil, fmt.Errorf("list own addresses: %w", err)
		}
		for _, p := range ps {
			out = append(out, p.Addr())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// SetOwn makes addrs the machine's own addresses, replacing the previous
// set: a frame from the wire claiming one as its source is forged and
// dropped as spoofed (except on loopback, where the machine talks to
// itself), whatever the lists say. It returns what it added and removed.
func (s *Shield) SetOwn(addrs []netip.Addr) (added, removed []netip.Addr, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[netip.Addr]bool{}
	n4, n6 := 0, 0
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if !a.IsValid() {
			return nil, nil, inputError{errors.New("invalid own address")}
		}
		if !want[a] {
			if a.Is4() {
				n4++
			} else {
				n6++
			}
		}
		want[a] = true
	}
	if n4 > maxOwn || n6 > maxOwn {
		return nil, nil, inputError{fmt.Errorf("%d IPv4 and %d IPv6 own addresses; the limit is %d each", n4, n6, maxOwn)}
	}
	have, err := s.ownLocked()
	if err != nil {
		return nil, nil, err
	}
	v4, v6 := s.ownTries()
	pick := func(a netip.Addr) trie {
		if a.Is4() {
			return v4
		}
		return v6
	}
	for _, a := range have {
		if !want[a] {
			removed = append(removed, a)
		}
		delete(want, a)
	}
	for a := range want {
		added = append(added, a)
	}
	slices.SortFunc(added, netip.Addr.Compare)
	for _, a := range added {
		t := pick(a)
		if err := t.m.Put(t.key(netip.PrefixFrom(a, a.BitLen())), uint8(1)); err != nil {
			return nil, nil, fmt.Errorf("add own address %s: %w", a, err)
		}
	}
	// Added entries and their verdicts first, then the flags; removed
	// ones after the flags.
	if err := s.syncVerdicts(); err != nil {
		return nil, nil, err
	}
	if err := s.publish(s.limits); err != nil {
		return nil, nil, err
	}
	for _, a := range removed {
		t := pick(a)
		if err := t.m.Delete(t.key(netip.PrefixFrom(a, a.BitLen()))); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil, fmt.Errorf("remove own address %s: %w", a, err)
		}
	}
	if len(removed) > 0 {
		if err := s.publish(s.limits); err != nil {
			return nil, nil, err
		}
		if err := s.syncVerdicts(); err != nil {
			return nil, nil, err
		}
		if err := s.republish(); err != nil {
			return nil, nil, err
		}
	}
	return added, removed, nil
}

// Verdicts in the verdict tries lists4/lists6: LIST_* in bpf/shield.c, as
// bpf2go emits them.
const (
	verdictAllow = uint8(bpf.ShieldListVerdictLIST_ALLOW)
	verdictDeny  = uint8(bpf.ShieldListVerdictLIST_DENY)
	verdictOwn   = uint8(bpf.ShieldListVerdictLIST_OWN)
)

func (s *Shield) verdictTries() (v4, v6 trie) {
	return trie{m: s.objs.Lists4}, trie{m: s.objs.Lists6, v6: true}
}

// wantVerdicts is what the verdict tries must hold for the two lists: every
// prefix of either, valued allow when an allow prefix contains it (itself
// included), deny otherwise. The program looks up an address's longest
// match; every listed prefix containing the address contains that match, so
// this gives "allow wins over deny" at any prefix length. Own addresses
// (host prefixes, the longest match of themselves) are valued own whatever
// covers them.
func wantVerdicts(allow, deny []netip.Prefix, own ...netip.Addr) map[netip.Prefix]uint8 {
	allowed := make(map[netip.Prefix]bool, len(allow))
	out := make(map[netip.Prefix]uint8, len(allow)+len(deny))
	for _, p := range allow {
		allowed[p] = true
		out[p] = verdictAllow
	}
	for _, p := range deny {
		if out[p] != 0 {
			continue
		}
		out[p] = verdictDeny
		for b := range p.Bits() {
			if allowed[netip.PrefixFrom(p.Addr(), b).Masked()] {
				out[p] = verdictAllow
				break
			}
		}
	}
	for _, a := range own {
		out[netip.PrefixFrom(a, a.BitLen())] = verdictOwn
	}
	return out
}

// readVerdicts returns what the verdict tries hold.
func (s *Shield) readVerdicts() (map[netip.Prefix]uint8, error) {
	out := map[netip.Prefix]uint8{}
	put := func(p netip.Prefix, v uint8) { out[p] = v }
	v4, v6 := s.verdictTries()
	if err := v4.each(put); err != nil {
		return nil, fmt.Errorf("read IPv4 verdicts: %w", err)
	}
	if err := v6.each(put); err != nil {
		return nil, fmt.Errorf("read IPv6 verdicts: %w", err)
	}
	return out, nil
}

// syncVerdicts makes the verdict tries match the lists: allow verdicts are
// written first, then deny verdicts, then stale entries are deleted, so a
// change widens what is allowed before it narrows anything. Callers hold
// s.mu (or own s exclusively).
func (s *Shield) syncVerdicts() error {
	allow, err := s.listLocked(AllowList)
	if err != nil {
		return err
	}
	deny, err := s.listLocked(DenyList)
	if err != nil {
		return err
	}
	own, err := s.ownLocked()
	if err != nil {
		return err
	}
	_, looked := ownSplit(own)
	want := wantVerdicts(allow, deny, looked...)
	have, err := s.readVerdicts()
	if err != nil {
		return err
	}
	v4, v6 := s.verdictTries()
	pick := func(p netip.Prefix) trie {
		if p.Addr().Is4() {
			return v4
		}
		return v6
	}
	for _, pass := range []uint8{verdictOwn, verdictAllow, verdictDeny} {
		for p, v := range want {
			if v != pass || have[p] == v {
				continue
			}
			t := pick(p)
			s.verdictsMoved = true
			if err := t.m.Put(t.key(p), v); err != nil {
				return fmt.Errorf("write verdict of %s: %w", p, err)
			}
		}
	}
	for p := range have {
		if _, ok := want[p]; ok {
			continue
		}
		t := pick(p)
		s.verdictsMoved = true
		if err := t.m.Delete(t.key(p)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete verdict of %s: %w", p, err)
		}
	}
	return nil
}

// republish swaps the configuration in again when the verdict tries
// changed since the last swap, so its region bitmaps (regions) follow
// them: a swap made before the tries lost entries kept their regions,
// which costs lookups, never verdicts. Callers hold s.mu.
func (s *Shield) republish() error {
	if !s.verdictsMoved {
		return nil
	}
	return s.publish(s.limits)
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
