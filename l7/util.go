package l7

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

type syscall_RawConn = syscall.RawConn

func contextBackground() context.Context { return context.Background() }

func addrPort(a net.Addr) (netip.AddrPort, error) {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort(), nil
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return ap, fmt.Errorf("address %q: %w", a, err)
	}
	return ap, nil
}
