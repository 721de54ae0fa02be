package l7

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"xdpshield/bpf"
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
// nothing is handed over before it exists).
func (fp *FastPath) newRelay(cookie uint64) (*relay, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("relay socket pair: %w", err)
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

// watch reads the client socket itself while the proxy reads the relay:
// it returns at the client's end (or an error, or the proxy's close), then
// waits until the proxy has read every byte the kernel passed (at most 2 s)
// and ends the relay. Data read here (the kernel passed it up rather than
// to the relay: its redirect found no relay) is written to the relay.
func (fp *FastPath) watch(cc *clientConn) {
	rl := cc.relay
	buf := make([]byte, 4096)
	for {
		n, err := cc.Conn.Read(buf)
		if n > 0 {
			fp.logf("conn %d: %d bytes passed up, not to its relay", cc.cookie, n)
			unix.Write(rl.w, buf[:n])
		}
		if err != nil {
			break
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

// Close closes the client socket and the relay.
func (cc *clientConn) Close() error {
	err := cc.Conn.Close()
	if cc.relay != nil {
		err = errors.Join(err, cc.relay.close())
	}
	return err
}
