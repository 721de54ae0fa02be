package l7

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
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

// MinKernel is the oldest kernel Attach accepts: the oldest on which the
// package's tests were seen to pass (6.18 on the host, 7.2 under qemu).
// Seen under qemu: on Debian's 5.10 the data plane loads and attaches, but
// the first requests live-locked the machine (soft lockups of the test's
// threads); on 6.1 a connection passed whole after a request that ended
// mid-segment lost its tail (the pipelined-split case and a FuzzL7 seed got
// one answer of two); 6.12 failed the same FuzzL7 seed once (all else
// passed).
var MinKernel = [2]int{6, 18}

// ErrOldKernel is what Attach returns (wrapped, with the kernel's release)
// on a kernel older than MinKernel, before it loads anything: the proxy
// alone serves there (Server.Start falls back to it).
var ErrOldKernel = errors.New("kernel older than l7.MinKernel")

func kernelAtLeast(major, minor int) (bool, string) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false, "unknown"
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var ma, mi int
	fmt.Sscanf(rel, "%d.%d", &ma, &mi)
	return ma > major || (ma == major && mi >= minor), rel
}
