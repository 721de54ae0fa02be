package sock

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// TCPPairs makes relays as TCP pairs on loopback (5.10 takes TCP sockets
// into a sockhash, not unix ones): one listening socket per fast path, in
// the network namespace it was opened in, and per relay a connection to it
// and the accepted end. Anything in that namespace may try to connect to
// the listener too. A socket filter on it drops every packet without
// Mark, which only the relays' connecting sockets carry (setting a
// mark takes CAP_NET_ADMIN): a stranger's handshake never completes, so
// strangers cannot fill the accept queue and stall the making of relays
// (the kernel drops a SYN while the queue is full). Behind that, Pair
// takes only the connection whose peer is its own connecting socket (the
// full address: a stranger cannot hold the same source address and port
// towards the same listener), and closes others.
type TCPPairs struct {
	mu        sync.Mutex // one pair at a time: the accept queue is matched in order
	fd        int        // listening, non-blocking; -1 once closed
	addr      unix.Sockaddr
	family    int
	strangers uint64 // connections accepted and closed: not a relay's
}

// PairTimeout bounds the making of one TCP relay (connect and accept).
const PairTimeout = 2 * time.Second

// Mark is the mark (SO_MARK) of a TCP relay's connecting socket: the
// listener's filter passes only packets carrying it ("l7rl"). A rule of
// the namespace that rewrites the marks of loopback traffic would leave
// every relay unmade: ListenTCPPairs finds it with a first pair.
const Mark = 0x6c37726c

// relayFilter passes a packet with Mark whole and drops any other
// (classic BPF).
var relayFilter = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0xfffff000 + 20}, // SKF_AD_OFF + SKF_AD_MARK
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: Mark},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},
}

// ListenTCPPairs opens the listener on 127.0.0.1, else [::1], port 0.
func ListenTCPPairs() (*TCPPairs, error) {
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
		tr := &TCPPairs{fd: fd, addr: sa, family: c.family}
		// One pair now: where the namespace rewrites loopback packets'
		// marks none passes the filter, and each accepted connection
		// would wait PairTimeout (under the fast path's policy lock) for a relay never made.
		r, w, err := tr.Pair()
		if err != nil {
			tr.Close()
			return nil, fmt.Errorf("relay listener on %s: a first relay: %w", sockaddrString(c.addr), err)
		}
		unix.Close(r)
		unix.Close(w)
		return tr, nil
	}
	return nil, errors.Join(errs...)
}

// Pair connects to the listener and accepts that connection: r is the
// accepted end (the relay's reading end), w the connecting one. Both are
// non-blocking, with TCP_NODELAY.
func (tr *TCPPairs) Pair() (r, w int, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.fd < 0 {
		return -1, -1, errors.New("tcp relay: the listener is closed")
	}
	deadline := time.Now().Add(PairTimeout)
	w, err = unix.Socket(tr.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("tcp relay socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(w)
		}
	}()
	if err = unix.SetsockoptInt(w, unix.SOL_SOCKET, unix.SO_MARK, Mark); err != nil {
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
func (tr *TCPPairs) Close() error {
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
