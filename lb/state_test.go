package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// disconnect dissolves a datagram socket's association: connect(2) with
// AF_UNSPEC.
func disconnect(fd int) error {
	sa := unix.RawSockaddr{Family: unix.AF_UNSPEC}
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	if e != 0 {
		return e
	}
	return nil
}

// TestStateReleased (issue 25, finding 2): what the balancer keeps for a
// socket goes when the socket goes, whatever became of its destination.
// Before, sock_release deleted the reverse entry named by the socket's
// destination at close, which is gone after a refused connect (200 of 200
// left), an unreachable one (200/200), an AF_UNSPEC disconnect (100/100),
// and never existed for an unconnected UDP socket.
func TestStateReleased(t *testing.T) {
	for _, mode := range stateModes(t) {
		t.Run(string(mode), func(t *testing.T) { testStateReleased(t, mode) })
	}
}

// stateModes are the state modes this kernel can run: the fallback always,
// sk_storage where the probe finds it. Every kernel the programs load on
// (5.10+) has bpf_sk_storage_get in cgroup sock_addr and cgroup/sock
// programs (seen on Debian's 5.10.0-32 in the VM matrix, and 6.18): a
// probe saying no there is a failure, the fallback is for kernels built
// otherwise.
func stateModes(t *testing.T) []StateMode {
	t.Helper()
	testutil.Root(t) // the probe loads programs: as nobody it always says no
	if probeStateMode() == StateSocket {
		return []StateMode{StateSocket, StateLRU}
	}
	assert.False(t, testutil.KernelAtLeast(5, 10), "bpf_sk_storage_get is not allowed in cgroup sock_addr or cgroup/sock programs on this 5.10+ kernel: only the %s fallback runs", StateLRU)
	return []StateMode{StateLRU}
}

func testStateReleased(t *testing.T, mode StateMode) {
	e := newEnvOpts(t, 2, Options{ReverseSize: 1024, state: mode})
	refused := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP}
	unreach := lbconf.ServiceKey{VIP: vip4, Port: 82, Proto: lbconf.TCP}
	udp := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
	for _, s := range []lbconf.Service{
		// A backend address with nothing listening on port 9: RST.
		{ServiceKey: refused, Mode: lbconf.Random, Backends: backends(netip.MustParseAddrPort("198.18.0.10:9"))},
		// A backend the client namespace has no route to.
		{ServiceKey: unreach, Mode: lbconf.Random, Backends: backends(netip.MustParseAddrPort("198.19.5.1:8080"))},
		{ServiceKey: udp, Mode: lbconf.Random, Backends: backends(backendAddrs(false, 2)...)},
	} {
		require.NoError(t, e.lb.AddService(s))
	}
	ap := func(k lbconf.ServiceKey) netip.AddrPort { return netip.AddrPortFrom(k.VIP, k.Port) }
	cases := []struct {
		name string
		n    int
		typ  int
		dst  netip.AddrPort
		do   func(fd int) error // what the socket does before it is closed
	}{
		{"refused", 200, unix.SOCK_STREAM, ap(refused), func(fd int) error {
			if err := unix.Connect(fd, sockaddrOf(ap(refused))); !errors.Is(err, syscall.ECONNREFUSED) {
				return errors.Join(errors.New("connect: want ECONNREFUSED"), err)
			}
			return nil
		}},
		{"unreachable", 200, unix.SOCK_STREAM, ap(unreach), func(fd int) error {
			if err := unix.Connect(fd, sockaddrOf(ap(unreach))); !errors.Is(err, syscall.ENETUNREACH) {
				return errors.Join(errors.New("connect: want ENETUNREACH"), err)
			}
			return nil
		}},
		{"disconnected", 100, unix.SOCK_DGRAM, ap(udp), func(fd int) error {
			if err := unix.Connect(fd, sockaddrOf(ap(udp))); err != nil {
				return err
			}
			return disconnect(fd)
		}},
		{"unconnected", 100, unix.SOCK_DGRAM, ap(udp), func(fd int) error {
			return unix.Sendto(fd, []byte("?\n"), 0, sockaddrOf(ap(udp)))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			entries, err := e.lb.ReverseEntries()
			require.NoError(t, err)
			states := e.snapStates(t)
			for i := range c.n {
				fd, err := e.rawSocket(c.dst, c.typ)
				require.NoError(t, err)
				err = c.do(fd)
				unix.Close(fd)
				require.NoError(t, err, "socket %d", i)
			}
			after, err := e.lb.ReverseEntries()
			require.NoError(t, err)
			assert.False(t, after != entries, "%d sockets %s and closed: %d entries left behind (%d before, %d after), want 0", c.n, c.name, after-entries, entries, after)
			e.checkStates(t, states, uint64(c.n), uint64(c.n))
		})
	}
}

// TestNoEviction (issue 25, finding 2): 5,000 one-shot UDP sockets to a
// service, with room for 1,024 sockets' state, leave a live TCP socket's
// getpeername and a queued UDP reply's source the VIP. Before, their
// leaked entries evicted the live ones: getpeername said the backend, the
// queued reply came from the backend.
func TestNoEviction(t *testing.T) {
	for _, mode := range stateModes(t) {
		t.Run(string(mode), func(t *testing.T) { testNoEviction(t, mode) })
	}
}

func testNoEviction(t *testing.T, mode StateMode) {
	const (
		oneShots = 5000
		capacity = 1024
	)
	e := newEnvOpts(t, 2, Options{ReverseSize: capacity, state: mode})
	tcp := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP}
	udp := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
	for _, k := range []lbconf.ServiceKey{tcp, udp} {
		require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(backendAddrs(false, 2)...)}))
	}
	tvip, uvip := netip.AddrPortFrom(tcp.VIP, tcp.Port), netip.AddrPortFrom(udp.VIP, udp.Port)
	states := e.snapStates(t)

	live, err := e.dial(tvip, netip.AddrPort{})
	require.NoError(t, err)
	defer live.Close()
	peer := func(when string) {
		t.Helper()
		p, err := live.peer()
		require.NoError(t, err)
		assert.False(t, unmap(p) != tvip, "%s: the live TCP socket's getpeername = %s, want the VIP %s", when, p, tvip)
	}
	peer("at first")

	// A reply waiting in a UDP socket's queue, read after the storm.
	queued, err := e.rawSocket(uvip, unix.SOCK_DGRAM)
	require.NoError(t, err)
	closeQueued := sync.OnceFunc(func() { unix.Close(queued) })
	defer closeQueued()
	require.NoError(t, unix.Sendto(queued, []byte("?\n"), 0, sockaddrOf(uvip)))
	pfd := []unix.PollFd{{Fd: int32(queued), Events: unix.POLLIN}}
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, err := unix.Poll(pfd, 100)
		if n == 1 {
			break
		}
		require.False(t, (err != nil && err != unix.EINTR) || time.Now().After(deadline), "no reply queued: %v", err)
	}

	for i := range oneShots {
		fd, err := e.rawSocket(uvip, unix.SOCK_DGRAM)
		require.NoError(t, err)
		err = unix.Sendto(fd, []byte("?\n"), 0, sockaddrOf(uvip))
		unix.Close(fd)
		require.NoError(t, err, "one-shot %d", i)
	}
	peer("after 5,000 one-shot sockets")
	_, from, err := recvReply(queued, 5000)
	require.NoError(t, err)
	assert.False(t, from != uvip, "the queued reply's source = %s, want the VIP %s", from, uvip)
	closeQueued()
	// 1 TCP, 1 queued, 5,000 one-shots got state; the one-shots and the
	// queued one (closed) released it.
	e.checkStates(t, states, oneShots+2, oneShots+1)
	if mode != StateSocket {
		// More open sockets than the LRU holds evict live state: the
		// fallback's limit, documented; sk_storage has none.
		return
	}

	// Twice as many sockets held open as the fallback's LRU could hold:
	// on the socket, nobody's state evicts anybody's.
	var open []int
	defer func() {
		for _, fd := range open {
			unix.Close(fd)
		}
	}()
	for i := range 2 * capacity {
		fd, err := e.rawSocket(uvip, unix.SOCK_DGRAM)
		require.NoError(t, err)
		open = append(open, fd)
		require.NoError(t, unix.Sendto(fd, []byte("?\n"), 0, sockaddrOf(uvip)), "open socket %d", i)
	}
	peer("with 2,048 UDP sockets open")
	if n, err := e.lb.ReverseEntries(); err != nil || n != 2*capacity+1 {
		assert.Fail(t, fmt.Sprintf("ReverseEntries() = %d, %v; want %d (the open sockets and the live TCP one)", n, err, 2*capacity+1))
	}
	e.checkStates(t, states, oneShots+2+2*capacity, oneShots+1)
}
