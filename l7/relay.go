package l7

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/l7/internal/sock"
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
		r, w, err := fp.tcpRelays.Pair()
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
// itself (sock.ReadToEnd: the end can come without a wakeup): that read
// runs the parser on data queued before the socket joined the sockhash
// (tcp_bpf_recvmsg_parser calls tcp_data_ready), and data read there
// (the kernel passed it up rather than to the relay: its redirect found
// no relay) is written to the relay. Where the relays are TCP pairs
// (5.10) it must not read: 5.10's tcp_bpf_recvmsg reads the TCP
// receive queue itself whenever the psock's queue is empty, taking bytes
// the stream parser has not yet run on (those it waits to have whole, or
// that arrived while the socket was locked), ahead of what the parser
// hands over after them. There it waits for POLLRDHUP (the FIN, set
// whoever reads) instead, and the parser is run on the data queued before
// the join by accept (sock.KickParser).
func (fp *FastPath) watch(cc *clientConn) {
	rl := cc.relay
	if fp.watchPoll {
		sock.AwaitEnd(cc.Conn)
	} else {
		err := sock.ReadToEnd(cc.Conn, make([]byte, 4096), func(p []byte) {
			cc.stray.Add(uint64(len(p)))
			fp.stray.Add(uint64(len(p)))
			fp.logf("conn %d: %d bytes passed up, not to its relay", cc.cookie, len(p))
			unix.Write(rl.w, p)
		})
		if err != nil && !errors.Is(err, net.ErrClosed) {
			fp.logf("conn %d: reading the client socket: %v", cc.cookie, err)
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
