package oldpins

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// Before the verdict generations (bpf/shield.c, lists4_b), the lists were
// kept in membership tries of their own, pinned as allow4, allow6, deny4
// and deny6, and a change was written entry by entry with its intent
// pinned as JournalPin for a rollback after a crash. Load reads such pins
// once (TakeLists), rolls back an interrupted change, puts the lists in
// force in the new layout and unpins them (Lists.Remove): from then on a
// change is in force whole or not at all without a journal.
const JournalPin = "journal"

// listPins are the old membership tries' pins: list and family.
var listPins = []struct {
	name string
	l    lists.List
	v6   bool
}{{"allow4", lists.AllowList, false}, {"allow6", lists.AllowList, true}, {"deny4", lists.DenyList, false}, {"deny6", lists.DenyList, true}}

// Journal operations of the old layout: what the change did to the prefix.
const (
	JournalAdded   uint8 = 1 // rollback removes it
	JournalRemoved uint8 = 2 // rollback puts it back
)

// JournalKey is one prefix of an old layout's change (20 bytes).
type JournalKey struct {
	List uint8
	Bits uint8
	Is4  uint8
	_    uint8
	Addr [16]byte
}

// Recovery says what Load rolled back of a change a crash interrupted in
// a version before the verdict generations.
type Recovery struct {
	Added, Removed map[lists.List]int // prefixes taken off again, put back
}

func (r Recovery) String() string {
	return fmt.Sprintf("rolled back a list change a crash interrupted: %d allow and %d deny prefixes it had added taken off again, "+
		"%d allow and %d deny prefixes it had removed put back",
		r.Added[lists.AllowList], r.Added[lists.DenyList], r.Removed[lists.AllowList], r.Removed[lists.DenyList])
}

// Lists are the lists read from the old layout's pins.
type Lists struct {
	Allow, Deny []netip.Prefix
	// Recovered is what was rolled back of an interrupted change (nil:
	// no journal was pinned).
	Recovered *Recovery
	paths     []string // to unpin once the lists are in force
}

// Remove unpins the old layout's tries and journal.
func (o *Lists) Remove() error {
	for _, p := range o.paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unpin the old list %s: %w", p, err)
		}
	}
	return nil
}

// TakeLists reads the lists from the old layout's pins in dir, with an
// interrupted change rolled back; nil when there are none.
func TakeLists(dir string) (*Lists, error) {
	sets := map[lists.List]map[netip.Prefix]bool{lists.AllowList: {}, lists.DenyList: {}}
	o := &Lists{}
	for _, n := range listPins {
		path := filepath.Join(dir, n.name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open the old list %s: %w", path, err)
		}
		o.paths = append(o.paths, path)
		err = eachPrefix(m, n.v6, func(p netip.Prefix) { sets[n.l][p] = true })
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("read the old list %s: %w", path, err)
		}
	}
	path := filepath.Join(dir, JournalPin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("open the old change journal %s: %w", path, err)
	default:
		defer m.Close()
		o.paths = append(o.paths, path)
		r := Recovery{Added: map[lists.List]int{}, Removed: map[lists.List]int{}}
		var k JournalKey
		var op uint8
		it := m.Iterate()
		for it.Next(&k, &op) {
			l := lists.List(k.List)
			if l != lists.AllowList && l != lists.DenyList {
				continue
			}
			a := netip.AddrFrom16(k.Addr)
			if k.Is4 == 1 {
				a = a.Unmap()
			}
			p := netip.PrefixFrom(a, int(k.Bits))
			switch op {
			case JournalAdded:
				delete(sets[l], p)
				r.Added[l]++
			case JournalRemoved:
				sets[l][p] = true
				r.Removed[l]++
			}
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("read the old change journal: %w", err)
		}
		o.Recovered = &r
	}
	if len(o.paths) == 0 {
		return nil, nil
	}
	o.Allow, o.Deny = lists.PrefixesOf(sets[lists.AllowList]), lists.PrefixesOf(sets[lists.DenyList])
	slices.Reverse(o.paths) // the journal first
	return o, nil
}

// eachPrefix calls fn for every prefix of an old membership trie (an LPM
// trie of the program's keys, a one-byte value).
func eachPrefix(m *ebpf.Map, v6 bool, fn func(netip.Prefix)) error {
	var v uint8
	if v6 {
		var k bpf.ShieldLpm6Key
		it := m.Iterate()
		for it.Next(&k, &v) {
			fn(netip.PrefixFrom(netip.AddrFrom16(k.Addr), int(k.Prefixlen)))
		}
		return it.Err()
	}
	var k bpf.ShieldLpm4Key
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(netip.PrefixFrom(netip.AddrFrom4(k.Addr), int(k.Prefixlen)))
	}
	return it.Err()
}

// DropVerdictTries unpins verdict tries of an earlier layout (a one-byte
// value, before the entries had hit counters) that spec cannot reuse, so
// that Load makes them afresh: their content is derived from the lists'
// record (the old membership tries, read by TakeLists), and a program
// still attached keeps its own reference to the old ones.
func DropVerdictTries(dir string, spec *ebpf.CollectionSpec) error {
	for _, name := range []string{bpf.ShieldMapLists4, bpf.ShieldMapLists6, bpf.ShieldMapLists4B, bpf.ShieldMapLists6B} {
		path := filepath.Join(dir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		incompatible := spec.Maps[name].Compatible(m) != nil
		m.Close()
		if incompatible {
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("unpin the old verdict trie %s: %w", path, err)
			}
		}
	}
	return nil
}

// Names are the names of the old pins this package reads in a pin
// directory: the lists' own tries and change journal, the sources
// table moved aside while it is copied, and the per-CPU hit counters.
func Names() []string {
	names := []string{JournalPin, SourcesPin, RuleHitsPin}
	for _, n := range listPins {
		names = append(names, n.name)
	}
	return names
}
