package lb

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
)

// Reverse returns the VIP (address and port) a socket, named by its cookie
// (SO_COOKIE), reached backend through, if the reverse-translation LRU
// holds it.
func (l *LB) Reverse(cookie uint64, backend netip.AddrPort) (netip.AddrPort, bool, error) {
	k := bpf.LbRevKey{Cookie: cookie, Backend: addrValue(backend.Addr().As16()), Port: netPort(backend.Port())}
	var v bpf.LbRev
	if err := l.objs.Reverse.Lookup(k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return netip.AddrPort{}, false, nil
		}
		return netip.AddrPort{}, false, fmt.Errorf("read reverse entry: %w", err)
	}
	var a16 [16]byte
	for i, w := range v.Vip.W {
		binaryPutNative(a16[4*i:], w)
	}
	addr := netip.AddrFrom16(a16).Unmap()
	return netip.AddrPortFrom(addr, netPort(v.Port)), true, nil
}

// ReverseEntries counts the entries of the reverse-translation LRU (a walk;
// for metrics and tests).
func (l *LB) ReverseEntries() (int, error) {
	var (
		k bpf.LbRevKey
		v bpf.LbRev
		n int
	)
	it := l.objs.Reverse.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("walk reverse entries: %w", err)
	}
	return n, nil
}
