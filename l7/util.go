package l7

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/xdpshield/xdpshield/internal/kernel"
)

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

// Kernels are the kernel series (major.minor) Attach accepts: those on
// which the package's tests were seen to pass, 6.18 on the host and 5.10,
// 6.1, 6.12 and 7.2 under qemu (with Relay). Every other is refused, newer
// ones too until they are seen to pass. Seen under qemu (README "L7 fast
// path", Kernels): on Debian's 5.10 with SK_PASS the first requests
// live-locked the machine (soft lockups of the test's threads), and
// redirected to the client socket, a pipelined pair was answered out of
// order; with a TCP relay (FastPath.RelayTCP: 5.10 takes no unix socket
// into a sockhash) whose watcher read the client socket, the same: 5.10's
// tcp_bpf_recvmsg reads the receive queue raw when the psock's is empty,
// and the watcher took requests the parser never saw. With a watcher that
// does not read (relay.go watch) the package passed there. On 6.12 and 7.2,
// without Relay, the kernel's parser never ran on the last bytes of a
// connection handed over to the proxy while a message passed before was
// still unread, with SK_PASS and with PassRedirect alike
// (TestFastPathPipelinedHandover: 7 to 14 of 102 hand-overs on 6.12, 3 of
// 34 and 3 of 68 on 7.2), and on 7.2 TestFastPathStickyStall stalled 2 and
// 3 of 200 connections (redirected, passed): those kernels turn a redirect
// to the socket's own ingress into SK_PASS (sk_psock_verdict_apply), and
// the stream parser's read (tcp_bpf_strp_read_sock) counts a message
// passed by an earlier read and still unread as consumed, which the
// reader counts again: copied_seq passes rcv_nxt and a short last segment
// wakes nobody. Relay avoids it.
var Kernels = [][2]int{{5, 10}, {6, 1}, {6, 12}, {6, 18}, {7, 2}}

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

// Relay: the data plane hands messages to the proxy by redirecting them to
// a relay socket per client connection (one end of a unix socket pair in
// the relays sockhash), which the proxy reads, rather than to the client
// socket's own ingress (bpf/l7.c relay). 6.12 and 7.2 turn a redirect to
// the socket's own ingress into SK_PASS, whose stream-parser accounting
// loses a hand-over's last piece (README "L7 fast path", Kernels); a
// redirect to another socket is counted once. The pair is a unix one
// where the kernel takes unix sockets into a sockhash (5.15+), else a TCP
// pair on loopback (5.10: FastPath.RelayTCP). Tests set it false to show
// that.
var Relay = true

// forceTCPRelay makes the relays TCP pairs even where unix ones work
// (tests: -l7.relay=tcp).
var forceTCPRelay = false

// watchRead makes the relays' watchers read the client socket with TCP
// relays too, and noKick leaves what a client socket queued before it
// joined the sockhash to the next data's arrival (tests: -l7.watch=read,
// -l7.watch=nokick; relay.go watch says why neither is done on 5.10).
var watchRead, noKick = false, false

// ErrKernelRefused is what Attach returns (wrapped, with the kernel's release)
// on a kernel not among Kernels, before it loads anything: the proxy alone
// serves there (Server.Start falls back to it).
var ErrKernelRefused = errors.New("kernel not among l7.Kernels, those the fast path was seen to pass on")

// KernelServes reports whether Attach accepts the running kernel (its
// series is among Kernels), and the kernel's release.
func KernelServes() (bool, string) {
	ma, mi, rel := kernelSeries()
	for _, k := range Kernels {
		if k == [2]int{ma, mi} {
			return true, rel
		}
	}
	return false, rel
}

func kernelSeries() (major, minor int, rel string) {
	rel = kernel.Release()
	major, minor, _ = kernel.Version(rel) // unreadable: 0.0, among no Kernels
	return major, minor, rel
}
