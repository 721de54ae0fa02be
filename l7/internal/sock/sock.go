package sock

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Control runs fn with c's fd and cookie.
func Control(c net.Conn, fn func(fd int, cookie uint64) error) error {
	sc, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return fmt.Errorf("%T has no socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("raw conn: %w", err)
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		cookie, err := unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
		if err != nil {
			ferr = fmt.Errorf("SO_COOKIE: %w", err)
			return
		}
		ferr = fn(int(fd), cookie)
	}); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	return ferr
}

// endWait bounds how long ReadToEnd reads again for an end it was told of
// (POLLRDHUP) but cannot read yet.
const endWait = 2 * time.Second

// errEndUnread: the peer ended (POLLRDHUP) but a read still found the
// socket's queue unread for endWait (ReadToEnd).
var errEndUnread = errors.New("the peer ended but its end stayed unread")

// ReadToEnd reads c until its peer's end, an error or c's close, handing
// each read's bytes to got. It does not wait for a wakeup that may not
// come: a socket in a sockhash with a stream parser answers a read with
// EAGAIN while its receive queue holds what the parser's deferred work
// has still to take (tcp_bpf_recvmsg_parser checks that queue before the
// shutdown), the FIN among it, and that work wakes no reader when it
// takes the FIN. So where a read would block after the peer has ended
// (POLLRDHUP, set at the FIN whoever reads), it reads again each
// millisecond until the end reads as one, for at most endWait
// (errEndUnread). 7.2 under TCG, before: 2 of 60 runs of l7's
// TestFastPathManyConns left one relay's watcher waiting for good.
func ReadToEnd(c net.Conn, buf []byte, got func([]byte)) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%T has no socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("raw conn: %w", err)
	}
	var ended time.Time // when a read first found the end told but unread
	for {
		var rerr error
		retry := false
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, err := unix.Read(int(fd), buf)
				switch {
				case n > 0:
					got(buf[:n])
					ended = time.Time{}
					continue
				case err == nil:
					return true // the end
				case err == unix.EINTR:
					continue
				case err != unix.EAGAIN:
					rerr = err
					return true
				case !peerEnded(int(fd)):
					return false // the poller wakes this at the next data or the end
				}
				retry = true
				return true
			}
		})
		if err != nil || !retry {
			return errors.Join(err, rerr)
		}
		// Out of rc.Read while waiting, so a Close of c goes on at once
		// (it waits for the reader's reference) and the next Read says
		// it was closed.
		if ended.IsZero() {
			ended = time.Now()
		} else if time.Since(ended) > endWait {
			return errEndUnread
		}
		time.Sleep(time.Millisecond)
	}
}

// peerEnded reports whether fd's peer has ended its side, or the socket
// hung up or failed, without waiting.
func peerEnded(fd int) bool {
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n > 0 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	}
}

// AwaitEnd returns once c's peer has ended its side (POLLRDHUP: the
// kernel sets it on the FIN, whether anyone reads or not), on an error or
// hang-up, or when c is closed, without reading c. The poller wakes it on
// the socket's state change; data redirected by the kernel wakes nothing.
func AwaitEnd(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool { return peerEnded(int(fd)) })
}

// KickParser runs the stream parser on what the client socket fd has
// queued: data that arrived before it joined the sockhash, which no
// data-ready call will parse until more arrives (and a client waiting for
// its answer sends nothing more). Setting SO_RCVLOWAT (to its default, 1)
// calls tcp_set_rcvlowat, which calls tcp_data_ready, which calls the
// socket's sk_data_ready, the parser's since the join (5.10 and later; the
// socket lock held, it queues the parser's work).
func KickParser(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1); err != nil {
		return fmt.Errorf("SO_RCVLOWAT: %w", err)
	}
	return nil
}

// UnixIntoSockhash returns nil when this kernel takes a stream unix socket
// into a sockhash (5.15 and later; not 5.10), else why not.
func UnixIntoSockhash() error {
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

// LocalAddrs lists the addresses of the calling thread's namespace.
func LocalAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// ListenerAddrs lists the current addresses of ln's network namespace
// (the kernel names it: SIOCGSKNS), entering it on a thread of its own
// when the caller's is another; false when that cannot be done (the caller
// keeps what Listen saw).
func ListenerAddrs(ln net.Listener) ([]netip.Addr, bool) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	nsfd := -1
	if err := rc.Control(func(fd uintptr) {
		nsfd, _ = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS)
	}); err != nil || nsfd < 0 {
		return nil, false
	}
	h := netns.NsHandle(nsfd)
	defer h.Close()
	type result struct {
		addrs []netip.Addr
		ok    bool
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{}
			return
		}
		defer orig.Close()
		if h.Equal(orig) {
			runtime.UnlockOSThread()
			ch <- result{LocalAddrs(), true}
			return
		}
		if err := netns.Set(h); err != nil {
			runtime.UnlockOSThread()
			ch <- result{}
			return
		}
		addrs := LocalAddrs()
		ch <- result{addrs, true}
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		} // else the thread, still locked, ends with the goroutine
	}()
	r := <-ch
	return r.addrs, r.ok
}
