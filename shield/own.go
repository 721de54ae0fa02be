package shield

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
)

func (s *Shield) ownTries() (v4, v6 trie) {
	return trie{s.objs.Own4Addrs, false}, trie{s.objs.Own6Addrs, true}
}

// ownSplit returns the own addresses the program compares inline (a family
// of at most config.OwnInline) and those it finds in the verdict tries (a family
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
		if len(fam) <= config.OwnInline {
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
			return nil, nil, config.Invalid(errors.New("invalid own address"))
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
		return nil, nil, config.Invalid(fmt.Errorf("%d IPv4 and %d IPv6 own addresses; the limit is %d each", n4, n6, maxOwn))
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
	// Added entries first (the record), then the lists' verdicts and the
	// configuration with the new set at once, then removed entries.
	next := slices.Clone(have)
	next = slices.DeleteFunc(next, func(a netip.Addr) bool { return slices.Contains(removed, a) })
	next = append(next, added...)
	slices.SortFunc(next, netip.Addr.Compare)
	allow, _ := s.listLocked(lists.AllowList)
	deny, _ := s.listLocked(lists.DenyList)
	if err := s.commitLists(allow, deny, next); err != nil {
		return nil, nil, err
	}
	for _, a := range removed {
		t := pick(a)
		if err := t.m.Delete(t.key(netip.PrefixFrom(a, a.BitLen()))); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil, fmt.Errorf("remove own address %s: %w", a, err)
		}
	}
	return added, removed, nil
}
