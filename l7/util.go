package l7

import (
	"context"
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

// MinKernel is the oldest kernel Attach accepts. On Debian's 5.10 the data
// plane live-locked the machine (soft lockups of the test's threads under
// qemu, the first fast-path test never finished), so kernels before 6.1 are
// refused until that is understood; 6.1 and 6.12 have not been run yet.
var MinKernel = [2]int{6, 1}

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
