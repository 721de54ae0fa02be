package ownaddr

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// List lists the addresses of every interface of the network namespace
// the calling thread is in (through h, or a fresh handle when h is nil).
func List(h *netlink.Handle) ([]netip.Addr, error) {
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

// Setter takes the whole set of own addresses and says what it added and
// removed: *shield.Shield.
type Setter interface {
	SetOwn(addrs []netip.Addr) (added, removed []netip.Addr, err error)
}

// Change is one update Watch made, or the error that stopped one.
type Change struct {
	Added, Removed []netip.Addr
	Err            error
}

// Watch makes the addresses of the calling thread's network namespace
// s's own addresses (SetOwn) and keeps them so on every netlink address
// update, until ctx ends. Call it from the namespace of the interface (the
// sockets stay bound to it). The first SetOwn happens before it returns;
// report, when set, hears of every later change.
func Watch(ctx context.Context, s Setter, report func(Change)) error {
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
	sync := func() Change {
		addrs, err := List(h)
		if err != nil {
			return Change{Err: err}
		}
		added, removed, err := s.SetOwn(addrs)
		return Change{Added: added, Removed: removed, Err: err}
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
						report(Change{Err: fmt.Errorf("address updates ended")})
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
