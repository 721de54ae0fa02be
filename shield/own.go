package shield

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// OwnAddresses lists the addresses of every interface of the network
// namespace the calling thread is in (through h, or a fresh handle when h
// is nil).
func OwnAddresses(h *netlink.Handle) ([]netip.Addr, error) {
	if h == nil {
		var err error
		if h, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
			return nil, fmt.Errorf("netlink handle: %w", err)
		}
		defer h.Close()
	}
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list own addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// OwnChange is one update WatchOwn made, or the error that stopped one.
type OwnChange struct {
	Added, Removed []netip.Addr
	Err            error
}

// WatchOwn makes the addresses of the calling thread's network namespace
// the shield's own addresses (SetOwn) and keeps them so on every netlink
// address update, until ctx ends. Call it from the namespace of the
// interface (the sockets stay bound to it). The first SetOwn happens
// before it returns; report, when set, hears of every later change.
func (s *Shield) WatchOwn(ctx context.Context, report func(OwnChange)) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE) // route only: a kernel without xfrm refuses the others
	if err != nil {
		return fmt.Errorf("netlink handle: %w", err)
	}
	updates := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	// Subscribe first, then list: an address added in between is seen
	// twice, never missed.
	if err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{}); err != nil {
		h.Close()
		return fmt.Errorf("subscribe to address updates: %w", err)
	}
	sync := func() OwnChange {
		addrs, err := OwnAddresses(h)
		if err != nil {
			return OwnChange{Err: err}
		}
		added, removed, err := s.SetOwn(addrs)
		return OwnChange{Added: added, Removed: removed, Err: err}
	}
	stop := func() {
		close(done)
		for range updates { // closed once the socket is
		}
		h.Close()
	}
	if ch := sync(); ch.Err != nil {
		stop()
		return ch.Err
	}
	go func() {
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-updates:
				if !ok {
					if report != nil {
						report(OwnChange{Err: fmt.Errorf("address updates ended")})
					}
					return
				}
			drain:
				for {
					select {
					case <-updates:
					default:
						break drain
					}
				}
				if ch := sync(); report != nil && (ch.Err != nil || len(ch.Added)+len(ch.Removed) > 0) {
					report(ch)
				}
			}
		}
	}()
	return nil
}

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
