package lb

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
)

// Reverse returns the VIP (address and port) the socket fd (open in this
// process) reached backend through, if the balancer's state for the socket
// says so.
func (l *LB) Reverse(fd int, backend netip.AddrPort) (netip.AddrPort, bool, error) {
	st, ok, err := l.socketState(fd)
	if err != nil || !ok {
		return netip.AddrPort{}, false, err
	}
	be := addrValue(backend.Addr().As16())
	port := netPort(backend.Port())
	for _, x := range st.X {
		if x.SvcId != 0 && x.Backend == be && x.BePort == port {
			var a16 [16]byte
			for i, w := range x.Vip.W {
				binaryPutNative(a16[4*i:], w)
			}
			addr := netip.AddrFrom16(a16).Unmap()
			return netip.AddrPortFrom(addr, netPort(x.VipPort)), true, nil
		}
	}
	return netip.AddrPort{}, false, nil
}

// socketState reads the state of socket fd: from its sk_storage (looked up
// by fd) or from the fallback's LRU (by its cookie).
func (l *LB) socketState(fd int) (bpf.LbSockLb, bool, error) {
	var st bpf.LbSockLb
	var err error
	if l.stateMode == StateSocket {
		err = l.objs.SockState.Lookup(int32(fd), &st)
	} else {
		cookie, cerr := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		if cerr != nil {
			return st, false, fmt.Errorf("socket cookie: %w", cerr)
		}
		err = l.objs.Reverse.Lookup(cookie, &st)
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read socket state: %w", err)
	}
	return st, true, nil
}

// StateCounters count per-socket state events, summed over CPUs.
type StateCounters struct {
	// Created: sockets that got state (their first translation).
	Created uint64
	// Released: sockets with state that were released.
	Released uint64
	// Evicted: translations overwritten because a socket used more
	// services than its state holds (4).
	Evicted uint64
	// Missed: translations whose state could not be stored (out of memory);
	// those sockets' getpeername and recvfrom report the backend.
	Missed uint64
}

// Live is how many sockets hold state now: created less released. With
// StateLRU it is an upper bound: a state the LRU evicted is never released,
// so Live is capped at the LRU's capacity.
func (c StateCounters) Live(mode StateMode, capacity uint32) uint64 {
	n := c.Created - min(c.Released, c.Created)
	if mode == StateLRU {
		n = min(n, uint64(capacity))
	}
	return n
}

// StateCounters reads the state counters (four per-CPU words, whatever
// the number of sockets).
func (l *LB) StateCounters() (StateCounters, error) {
	var out [4]uint64
	for i := range out {
		var per []uint64
		if err := l.objs.StateCounters.Lookup(uint32(i), &per); err != nil {
			return StateCounters{}, fmt.Errorf("read state counters: %w", err)
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return StateCounters{Created: out[0], Released: out[1], Evicted: out[2], Missed: out[3]}, nil
}

// ReverseEntries is how many sockets hold state (StateCounters.Live): read
// from counters, not a walk.
func (l *LB) ReverseEntries() (int, error) {
	c, err := l.StateCounters()
	if err != nil {
		return 0, err
	}
	return int(c.Live(l.stateMode, l.ReverseSize())), nil
}
