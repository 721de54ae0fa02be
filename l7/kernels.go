package l7

import (
	"errors"

	"github.com/xdpshield/xdpshield/internal/kernel"
)

// Kernels are the kernel series (major.minor) Attach accepts: those on
// which the package's tests were seen to pass, 6.18 on the host and 5.10,
// 6.1, 6.12 and 7.2 under qemu (with relays). Every other is refused, newer
// ones too until they are seen to pass. Seen under qemu (docs/l7.md,
// Kernels): on Debian's 5.10 with SK_PASS the first requests
// live-locked the machine (soft lockups of the test's threads), and
// redirected to the client socket, a pipelined pair was answered out of
// order; with a TCP relay (FastPath.RelayTCP: 5.10 takes no unix socket
// into a sockhash) whose watcher read the client socket, the same: 5.10's
// tcp_bpf_recvmsg reads the receive queue raw when the psock's is empty,
// and the watcher took requests the parser never saw. With a watcher that
// does not read (relay.go watch) the package passed there. On 6.12 and 7.2,
// without relays (NoRelay), the kernel's parser never ran on the last bytes of a
// connection handed over to the proxy while a message passed before was
// still unread, with SK_PASS and redirected alike
// (TestFastPathPipelinedHandover: 7 to 14 of 102 hand-overs on 6.12, 3 of
// 34 and 3 of 68 on 7.2), and on 7.2 TestFastPathStickyStall stalled 2 and
// 3 of 200 connections (redirected, passed): those kernels turn a redirect
// to the socket's own ingress into SK_PASS (sk_psock_verdict_apply), and
// the stream parser's read (tcp_bpf_strp_read_sock) counts a message
// passed by an earlier read and still unread as consumed, which the
// reader counts again: copied_seq passes rcv_nxt and a short last segment
// wakes nobody. Relays avoid it.
var Kernels = [][2]int{{5, 10}, {6, 1}, {6, 12}, {6, 18}, {7, 2}}

// Options are how Attach hands messages over to the proxy and which
// kernels it accepts. The zero value is what serve runs: the kernels of
// Kernels, and each message for the proxy redirected to a relay socket of
// its connection (a unix socket, or a TCP pair on loopback whose watcher
// does not read, the parser run at the join, where the kernel takes no
// unix socket into a sockhash). The other values bring back, in tests,
// the kernels' bugs those choices avoid (the tests' -l7.* flags).
type Options struct {
	// Kernels are the kernel series Attach accepts; nil: Kernels. An
	// empty list that is not nil accepts none.
	Kernels [][2]int
	// SKPass hands messages to the proxy with SK_PASS instead of
	// redirecting them to the client socket's own ingress (bpf/l7.c
	// pass_redirect; FastPath.PassRedirect false). With SK_PASS, a message
	// could wait unread for good: on 6.1 under qemu the tail of a
	// connection handed over while a message passed before was still
	// unread never reached the parser (TestFastPathPipelinedHandover: 27
	// of 170 hand-overs answered once of twice; redirected, 0 of 442), and
	// on 6.18 about one sticky connection in 2,000 stalled
	// (TestFastPathStickyStall: 16 of 33,000 connections in 12 of 22 runs;
	// redirected, 0 of 33,000).
	SKPass bool
	// NoRelay hands messages to the proxy through the client socket's own
	// ingress rather than a relay socket per client connection (one end
	// of a socket pair in the relays sockhash, which the proxy reads;
	// bpf/l7.c relay; FastPath.Relay false). 6.12 and 7.2 turn a redirect
	// to the socket's own ingress into SK_PASS, whose stream-parser
	// accounting loses a hand-over's last piece (docs/l7.md, Kernels); a
	// redirect to another socket is counted once. The pair is a unix one
	// where the kernel takes unix sockets into a sockhash (5.15+), else a
	// TCP pair on loopback (5.10: FastPath.RelayTCP).
	NoRelay bool
	// TCPRelay makes the relays TCP pairs even where unix ones work.
	TCPRelay bool
	// WatchRead makes the watchers of TCP relays read the client socket,
	// and NoKick leaves what a client socket queued before it joined the
	// sockhash to the next data's arrival (relay.go watch says why neither
	// is done on 5.10).
	WatchRead, NoKick bool
	// Reuse, when not nil, is the data plane Attach uses, reset, instead
	// of loading one (loaded into it when it holds none of this variant),
	// and FastPath.Close gives back instead of closing (DataPlane).
	Reuse *DataPlane
}

// kernels are the kernel series o accepts.
func (o Options) kernels() [][2]int {
	if o.Kernels == nil {
		return Kernels
	}
	return o.Kernels
}

// kernelServes is KernelServes under o.
func (o Options) kernelServes() (bool, string) {
	ma, mi, rel := kernelSeries()
	for _, k := range o.kernels() {
		if k == [2]int{ma, mi} {
			return true, rel
		}
	}
	return false, rel
}

// ErrKernelRefused is what Attach returns (wrapped, with the kernel's release)
// on a kernel not among Kernels, before it loads anything: the proxy alone
// serves there (Server.Start falls back to it).
var ErrKernelRefused = errors.New("kernel not among l7.Kernels, those the fast path was seen to pass on")

// KernelServes reports whether Attach accepts the running kernel (its
// series is among Kernels), and the kernel's release.
func KernelServes() (bool, string) { return Options{}.kernelServes() }

func kernelSeries() (major, minor int, rel string) {
	rel = kernel.Release()
	major, minor, _ = kernel.Version(rel) // unreadable: 0.0, among no Kernels
	return major, minor, rel
}
