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

// MinKernel is the oldest kernel Attach accepts outright: 6.18 on the
// host and 7.2 under qemu pass the package's tests. Older ones are refused
// but for the series of OldKernels. Seen under qemu (README "L7 fast
// path", Kernels): on Debian's 5.10 the data plane loads and attaches, but
// the first requests live-locked the machine (soft lockups of the test's
// threads); on 6.12 the kernel's parser never ran on the last bytes of a
// connection handed over to the proxy while a message passed before was
// still unread, with SK_PASS and with PassRedirect alike
// (TestFastPathPipelinedHandover: 7 of 102 hand-overs answered once of
// twice, redirected).
var MinKernel = [2]int{6, 18}

// OldKernels are the series (major.minor) older than MinKernel that Attach
// accepts too: each passed the package's tests under qemu (with
// PassRedirect).
var OldKernels = [][2]int{{6, 1}}

// PassRedirect: the data plane hands messages to the proxy by redirecting
// them to the client socket's own ingress instead of passing them
// (SK_PASS; bpf/l7.c pass_redirect). With SK_PASS, a message could wait
// unread for good: on 6.1 under qemu the tail of a connection handed over
// while a message passed before was still unread never reached the parser
// (TestFastPathPipelinedHandover: 27 of 170 hand-overs answered once of
// twice; redirected, 0 of 442), and on 6.18 about one sticky connection in
// 2,000 stalled (TestFastPathStickyStall: 16 of 33,000 connections in 12 of
// 22 runs; redirected, 0 of 33,000). Tests set it false to show that.
var PassRedirect = true

// ErrOldKernel is what Attach returns (wrapped, with the kernel's release)
// on a kernel it does not accept (KernelServes), before it loads
// anything: the proxy alone serves there (Server.Start falls back to it).
var ErrOldKernel = errors.New("kernel older than l7.MinKernel and not among l7.OldKernels")

// KernelServes reports whether Attach accepts the running kernel (at least
// MinKernel, or of a series of OldKernels), and the kernel's release.
func KernelServes() (bool, string) {
	ok, rel := kernelAtLeast(MinKernel[0], MinKernel[1])
	if ok {
		return true, rel
	}
	var ma, mi int
	fmt.Sscanf(rel, "%d.%d", &ma, &mi)
	for _, k := range OldKernels {
		if k == [2]int{ma, mi} {
			return true, rel
		}
	}
	return false, rel
}

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
