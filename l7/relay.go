package l7

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
)

// relay is a client connection's relay: a stream socket pair, one end (r)
// in the data plane's relays sockhash, which the proxy reads instead of the
// client socket; the kernel redirects there what it hands over (bpf/l7.c
// relay). Nothing writes to the other end (w) but the client socket's
// watcher: it shuts w's writing down once the client's side has ended and
// the proxy has read all the kernel passed, so the proxy sees the end.
type relay struct {
	r         net.Conn
	w         int
	endOnce   sync.Once
	closeOnce sync.Once
	closeErr  error
}

// newRelay makes cc's relay and puts its reading end into the relays
// sockhash under cc's cookie (before the client socket joins clients, so
// nothing is handed over before it exists): a unix socket pair, or a TCP
// pair on loopback where the kernel takes no unix socket into a sockhash
// (fp.RelayTCP).
func (fp *FastPath) newRelay(cookie uint64) (*relay, error) {
	var fds [2]int
	if fp.tcpRelays != nil {
		r, w, err := fp.tcpRelays.pair()
		if err != nil {
			return nil, err
		}
		fds = [2]int{r, w}
	} else {
		var err error
		fds, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return nil, fmt.Errorf("relay socket pair: %w", err)
		}
	}
	if err := fp.objs.Relays.Put(cookie, uint32(fds[0])); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("put relay socket: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "l7-relay")
	r, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fp.objs.Relays.Delete(cookie)
		unix.Close(fds[1])
		return nil, fmt.Errorf("relay conn: %w", err)
	}
	return &relay{r: r, w: fds[1]}, nil
}

// tcpRelays makes relays as TCP pairs on loopback (5.10 takes TCP sockets
// into a sockhash, not unix ones): one listening socket per FastPath, in
// the network namespace Attach ran in, and per relay a connection to it
// and the accepted end. Anything in that namespace may try to connect to
// the listener too. A socket filter on it drops every packet without
// relayMark, which only the relays' connecting sockets carry (setting a
// mark takes CAP_NET_ADMIN): a stranger's handshake never completes, so
// strangers cannot fill the accept queue and stall the making of relays
// (the kernel drops a SYN while the queue is full). Behind that, pair
// takes only the connection whose peer is its own connecting socket (the
// full address: a stranger cannot hold the same source address and port
// towards the same listener), and closes others.
type tcpRelays struct {
	mu        sync.Mutex // one pair at a time: the accept queue is matched in order
	fd        int        // listening, non-blocking; -1 once closed
	addr      unix.Sockaddr
	family    int
	strangers uint64 // connections accepted and closed: not a relay's
}

// relayTimeout bounds the making of one TCP relay (connect and accept).
const relayTimeout = 2 * time.Second

// relayMark is the mark (SO_MARK) of a TCP relay's connecting socket: the
// listener's filter passes only packets carrying it ("l7rl"). A rule of
// the namespace that rewrites the marks of loopback traffic would leave
// every relay unmade: listenRelays finds it with a first pair.
const relayMark = 0x6c37726c

// relayFilter passes a packet with relayMark whole and drops any other
// (classic BPF).
var relayFilter = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0xfffff000 + 20}, // SKF_AD_OFF + SKF_AD_MARK
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: relayMark},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},
}

// listenRelays opens the listener on 127.0.0.1, else [::1], port 0.
func listenRelays() (*tcpRelays, error) {
	var errs []error
	for _, c := range []struct {
		family int
		addr   unix.Sockaddr
	}{
		{unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}},
		{unix.AF_INET6, &unix.SockaddrInet6{Addr: [16]byte{15: 1}}},
	} {
		fd, err := unix.Socket(c.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err == nil {
			err = unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
				&unix.SockFprog{Len: uint16(len(relayFilter)), Filter: &relayFilter[0]})
		}
		if err == nil {
			err = unix.Bind(fd, c.addr)
		}
		if err == nil {
			err = unix.Listen(fd, 128)
		}
		var sa unix.Sockaddr
		if err == nil {
			sa, err = unix.Getsockname(fd)
		}
		if err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			errs = append(errs, fmt.Errorf("relay listener on %s: %w", sockaddrString(c.addr), err))
			continue
		}
		tr := &tcpRelays{fd: fd, addr: sa, family: c.family}
		// One pair now: where the namespace rewrites loopback packets'
		// marks none passes the filter, and each accepted connection
		// would wait relayTimeout (under polMu) for a relay never made.
		r, w, err := tr.pair()
		if err != nil {
			tr.close()
			return nil, fmt.Errorf("relay listener on %s: a first relay: %w", sockaddrString(c.addr), err)
		}
		unix.Close(r)
		unix.Close(w)
		return tr, nil
	}
	return nil, errors.Join(errs...)
}

// pair connects to the listener and accepts that connection: r is the
// accepted end (the relay's reading end), w the connecting one. Both are
// non-blocking, with TCP_NODELAY.
func (tr *tcpRelays) pair() (r, w int, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.fd < 0 {
		return -1, -1, errors.New("tcp relay: the listener is closed")
	}
	deadline := time.Now().Add(relayTimeout)
	w, err = unix.Socket(tr.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("tcp relay socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(w)
		}
	}()
	if err = unix.SetsockoptInt(w, unix.SOL_SOCKET, unix.SO_MARK, relayMark); err != nil {
		return -1, -1, fmt.Errorf("tcp relay: SO_MARK: %w", err)
	}
	if err = unix.Connect(w, tr.addr); err == unix.EINPROGRESS {
		if err = waitFD(w, unix.POLLOUT, deadline); err == nil {
			var soErr int
			if soErr, err = unix.GetsockoptInt(w, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soErr != 0 {
				err = unix.Errno(soErr)
			}
		}
	}
	if err != nil {
		return -1, -1, fmt.Errorf("tcp relay connect to %s: %w", sockaddrString(tr.addr), err)
	}
	local, err := unix.Getsockname(w)
	if err != nil {
		return -1, -1, fmt.Errorf("tcp relay: getsockname: %w", err)
	}
	for {
		r, peer, aerr := unix.Accept4(tr.fd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		switch {
		case aerr == unix.EAGAIN:
			if err = waitFD(tr.fd, unix.POLLIN, deadline); err != nil {
				return -1, -1, fmt.Errorf("tcp relay accept of %s: %w", sockaddrString(local), err)
			}
			continue
		case aerr == unix.EINTR || aerr == unix.ECONNABORTED:
			continue
		case aerr != nil:
			return -1, -1, fmt.Errorf("tcp relay accept: %w", aerr)
		}
		if !sameSockaddr(peer, local) {
			unix.Close(r) // a stranger's: never a relay
			tr.strangers++
			continue
		}
		for _, fd := range []int{r, w} {
			if err = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
				unix.Close(r)
				return -1, -1, fmt.Errorf("tcp relay: TCP_NODELAY: %w", err)
			}
		}
		return r, w, nil
	}
}

// close closes the listener (the relays made keep working).
func (tr *tcpRelays) close() error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.fd < 0 {
		return nil
	}
	err := unix.Close(tr.fd)
	tr.fd = -1
	return err
}

// waitFD polls fd for events until deadline.
func waitFD(fd int, events int16, deadline time.Time) error {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return os.ErrDeadlineExceeded
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(pfd, int(left/time.Millisecond)+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
}

func sameSockaddr(a, b unix.Sockaddr) bool {
	switch a := a.(type) {
	case *unix.SockaddrInet4:
		b, ok := b.(*unix.SockaddrInet4)
		return ok && a.Addr == b.Addr && a.Port == b.Port
	case *unix.SockaddrInet6:
		b, ok := b.(*unix.SockaddrInet6)
		return ok && a.Addr == b.Addr && a.Port == b.Port
	}
	return false
}

func sockaddrString(sa unix.Sockaddr) string {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)).String()
	}
	return fmt.Sprintf("%T", sa)
}

// end shuts the writing end down: the proxy reads the end of the stream
// after what the kernel handed over.
func (rl *relay) end() {
	rl.endOnce.Do(func() { unix.Shutdown(rl.w, unix.SHUT_WR) })
}

// close closes both ends, once (w is a bare descriptor: a second close
// could close another file's).
func (rl *relay) close() error {
	rl.closeOnce.Do(func() {
		rl.end()
		rl.closeErr = errors.Join(rl.r.Close(), unix.Close(rl.w))
	})
	return rl.closeErr
}

// watch follows the client socket while the proxy reads the relay: it
// returns at the client's end (or an error, or the proxy's close), then
// waits until the proxy has read every byte the kernel passed (at most 2 s)
// and ends the relay. With unix relays (5.15+) it reads the client socket
// itself: that read runs the parser on data queued before the socket
// joined the sockhash (tcp_bpf_recvmsg_parser calls tcp_data_ready), and
// data read there (the kernel passed it up rather than to the relay: its
// redirect found no relay) is written to the relay. Where the relays are TCP
// pairs (5.10) it must not read: 5.10's tcp_bpf_recvmsg reads the TCP
// receive queue itself whenever the psock's queue is empty, taking bytes
// the stream parser has not yet run on (those it waits to have whole, or
// that arrived while the socket was locked), ahead of what the parser
// hands over after them. There it waits for POLLRDHUP (the FIN, set
// whoever reads) instead, and the parser is run on the data queued before
// the join by accept (kickParser).
func (fp *FastPath) watch(cc *clientConn) {
	rl := cc.relay
	if fp.watchPoll {
		awaitEnd(cc.Conn)
	} else {
		buf := make([]byte, 4096)
		for {
			n, err := cc.Conn.Read(buf)
			if n > 0 {
				cc.stray.Add(uint64(n))
				fp.stray.Add(uint64(n))
				fp.logf("conn %d: %d bytes passed up, not to its relay", cc.cookie, n)
				unix.Write(rl.w, buf[:n])
			}
			if err != nil {
				break
			}
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	var last uint64
	stable := 0
	for time.Now().Before(deadline) {
		var c bpf.L7Conn
		// The maps close under fp.mu, with shut set (Close).
		fp.mu.Lock()
		err := errors.New("the fast path is closed")
		if !fp.shut {
			err = fp.objs.Conns.Lookup(cc.cookie, &c)
		}
		fp.mu.Unlock()
		if err != nil {
			break
		}
		// passed_bytes counts at the verdict, before the relay has the
		// bytes; a verdict may still be due for data before the end: wait
		// for the count to hold still too.
		if c.PassedBytes == last && cc.read.Load() >= c.PassedBytes {
			if stable++; stable >= 5 {
				break
			}
		} else {
			stable = 0
		}
		last = c.PassedBytes
		time.Sleep(time.Millisecond)
	}
	rl.end()
}

// awaitEnd returns once c's peer has ended its side (POLLRDHUP: the
// kernel sets it on the FIN, whether anyone reads or not), on an error or
// hang-up, or when c is closed, without reading c. The poller wakes it on
// the socket's state change; data redirected by the kernel wakes nothing.
func awaitEnd(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool {
		for {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
			n, err := unix.Poll(pfd, 0)
			if err == unix.EINTR {
				continue
			}
			return err != nil || n > 0 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
		}
	})
}

// kickParser runs the stream parser on what the client socket fd has
// queued: data that arrived before it joined the sockhash, which no
// data-ready call will parse until more arrives (and a client waiting for
// its answer sends nothing more). Setting SO_RCVLOWAT (to its default, 1)
// calls tcp_set_rcvlowat, which calls tcp_data_ready, which calls the
// socket's sk_data_ready, the parser's since the join (5.10 and later; the
// socket lock held, it queues the parser's work).
func kickParser(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1); err != nil {
		return fmt.Errorf("SO_RCVLOWAT: %w", err)
	}
	return nil
}

// relaySupported reports whether this kernel takes a stream unix socket
// into a sockhash (5.15 and later; not 5.10).
func relaySupported() error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockHash, KeySize: 8, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("sockhash: %w", err)
	}
	defer m.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket pair: %w", err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := m.Put(uint64(0), uint32(fds[0])); err != nil {
		return fmt.Errorf("unix socket into a sockhash: %w", err)
	}
	return nil
}

// reader is what the proxy reads: the relay, or the client socket.
func (cc *clientConn) reader() net.Conn {
	if cc.relay != nil {
		return cc.relay.r
	}
	return cc.Conn
}

// SetReadDeadline applies to what the proxy reads.
func (cc *clientConn) SetReadDeadline(t time.Time) error {
	return cc.reader().SetReadDeadline(t)
}

// SetDeadline applies to what the proxy reads and to its writes (with a
// relay, not to the client socket's reads: those are the watcher's).
func (cc *clientConn) SetDeadline(t time.Time) error {
	if cc.relay != nil {
		return errors.Join(cc.relay.r.SetReadDeadline(t), cc.Conn.SetWriteDeadline(t))
	}
	return cc.Conn.SetDeadline(t)
}

// Write writes what the proxy answers once the responses owed to the
// requests the kernel redirected before have been relayed (respond.go).
func (cc *clientConn) Write(p []byte) (int, error) {
	if cc.fp != nil {
		cc.fp.awaitOwed(cc)
	}
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	return cc.Conn.Write(p)
}

// Close closes the client socket and the relay, once the responses owed
// to requests the kernel redirected have been relayed (the proxy closes
// after its last answer; theirs come before it).
func (cc *clientConn) Close() error {
	if cc.fp != nil {
		cc.fp.awaitOwed(cc)
	}
	err := cc.Conn.Close()
	if cc.relay != nil {
		err = errors.Join(err, cc.relay.close())
	}
	return err
}
