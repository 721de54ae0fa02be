package sock

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// newNS is a throwaway namespace for one test (root only).
func newNS(t *testing.T) *topo.NS {
	t.Helper()
	testutil.Root(t)
	ns, err := topo.New("l7sock")
	require.NoError(t, err, "topo.New")
	t.Cleanup(func() { ns.Close() })
	return ns
}

// TestTCPRelayRefusesStranger: a stranger without the relays' mark cannot
// connect to the TCP relays' listener at all (its filter), and a
// connection that is not the relay's own connecting socket (here one with
// the mark: a privileged process) is closed, never taken as a relay:
// pair's reading end is connected to its writing end, and the stranger
// reads the close.
func TestTCPRelayRefusesStranger(t *testing.T) {
	withRelays(t, func(tr *TCPPairs) error {
		if c, err := net.DialTimeout("tcp", sockaddrString(tr.addr), 500*time.Millisecond); err == nil {
			c.Close()
			assert.Fail(t, "a stranger without the relays' mark connected to their listener, want its handshake dropped")
		}
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, Mark)
			}); err != nil {
				return err
			}
			return serr
		}}
		stranger, err := d.Dial("tcp", sockaddrString(tr.addr))
		if err != nil {
			return err
		}
		defer stranger.Close()
		// The stranger is in the accept queue before the relay connects.
		if err := waitFD(tr.fd, unix.POLLIN, time.Now().Add(5*time.Second)); err != nil {
			return fmt.Errorf("stranger not queued: %w", err)
		}
		r, w, err := tr.Pair()
		if err != nil {
			return fmt.Errorf("pair = %w", err)
		}
		defer unix.Close(r)
		defer unix.Close(w)
		peer, err := unix.Getpeername(r)
		if err != nil {
			return err
		}
		local, err := unix.Getsockname(w)
		if err != nil {
			return err
		}
		assert.True(t, sameSockaddr(peer, local), "pair: reading end's peer = %s, want the writing end %s (stranger %s)", sockaddrString(peer), sockaddrString(local), stranger.LocalAddr())
		assert.EqualValues(t, 1, tr.strangers, "strangers = %d, want 1", tr.strangers)
		stranger.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = stranger.Read(make([]byte, 1))
		assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "stranger's read = %v, want the listener's close", err)
		if _, err := unix.Write(w, []byte("x")); err != nil {
			return err
		}
		if err := waitFD(r, unix.POLLIN, time.Now().Add(5*time.Second)); err != nil {
			return fmt.Errorf("relay read: %w", err)
		}
		buf := make([]byte, 2)
		if n, err := unix.Read(r, buf); assert.NoError(t, err, "relay read: want \"x\"") {
			assert.Equal(t, "x", string(buf[:n]), "relay read = %q, want \"x\"", buf[:n])
		}
		return nil
	})
}

// withRelays runs f on a TCP relays' listener in a namespace of its own.
func withRelays(t *testing.T, f func(tr *TCPPairs) error) {
	t.Helper()
	ns := newNS(t)
	require.NoError(t, ns.Do(func() error {
		tr, err := ListenTCPPairs()
		if err != nil {
			return err
		}
		defer tr.Close()
		return f(tr)
	}))
}

// TestTCPRelayBacklogFlood: any local process in the namespace, of any
// user, can connect to the TCP relays' listener and leave its connections
// unaccepted. Once they fill the accept queue the kernel drops the SYN of
// a relay's own connecting socket, so without a guard no relay could be
// made while they stay there: each accepted client connection would wait
// PairTimeout (under the FastPath's policy lock) and go without its
// relay. pair still makes its relay with the queue full of strangers.
func TestTCPRelayBacklogFlood(t *testing.T) {
	withRelays(t, func(tr *TCPPairs) error {
		// More than the listener's backlog: some of them stay half-open.
		var strangers []int
		defer func() {
			for _, fd := range strangers {
				unix.Close(fd)
			}
		}()
		for range 300 {
			fd, err := unix.Socket(tr.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				return err
			}
			strangers = append(strangers, fd)
			if err := unix.Connect(fd, tr.addr); err != nil && err != unix.EINPROGRESS {
				return fmt.Errorf("stranger's connect: %w", err)
			}
		}
		// Were their handshakes let through, the first ones would sit in
		// the accept queue by now (loopback: within the connect).
		waitFD(strangers[0], unix.POLLOUT, time.Now().Add(time.Second))
		r, w, err := tr.Pair()
		if !assert.NoError(t, err, "pair with the accept queue full of strangers: want a relay") {
			return nil
		}
		unix.Close(r)
		unix.Close(w)
		return nil
	})
}

// TestAwaitEnd: AwaitEnd neither reads nor returns on data (the poller
// wakes it; it goes back to waiting), returns at the peer's FIN with the
// data still queued, and returns when the connection is closed under it.
func TestAwaitEnd(t *testing.T) {
	eachEnd(t, func(end string, peer, c net.Conn) error {
		done := make(chan struct{})
		go func() { AwaitEnd(c); close(done) }()
		if _, err := peer.Write([]byte("data")); err != nil {
			return err
		}
		select {
		case <-done:
			assert.Failf(t, "returned early", "%s: AwaitEnd returned on data, before the end", end)
		case <-time.After(200 * time.Millisecond):
		}
		if end == "fin" {
			peer.(*net.TCPConn).CloseWrite()
		} else {
			c.Close()
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			require.Failf(t, "no return", "%s: AwaitEnd still waiting 5 s after the end", end)
		}
		if end == "fin" {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, err := io.ReadAll(c)
			assert.EqualValues(t, "data", string(b), "fin: read after AwaitEnd = %q, %v, want the data it left queued", b, err)
		}
		return nil
	})
}

// eachEnd runs f on a fresh connection pair in a throwaway namespace for
// each way a connection ends: the peer's FIN, or this side's close (c is
// the accepted side, peer the dialling one).
func eachEnd(t *testing.T, f func(end string, peer, c net.Conn) error) {
	ns := newNS(t)
	require.NoError(t, ns.Do(func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		for _, end := range []string{"fin", "close"} {
			peer, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return err
			}
			c, err := ln.Accept()
			if err != nil {
				peer.Close()
				return err
			}
			err = f(end, peer, c)
			c.Close()
			peer.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}))
}

// TestReadToEnd: ReadToEnd hands over what arrives and returns at the
// peer's end (nil) or at the socket's close (net.ErrClosed), not before.
// The case it exists for (a read that finds the FIN queued for a stream
// parser's deferred work) needs a sockhash: l7's TestFastPathManyConns
// meets it on 7.2.
func TestReadToEnd(t *testing.T) {
	eachEnd(t, func(end string, peer, c net.Conn) error {
		got := make(chan string, 8)
		done := make(chan error, 1)
		go func() { done <- ReadToEnd(c, make([]byte, 64), func(p []byte) { got <- string(p) }) }()
		if _, err := peer.Write([]byte("data")); err != nil {
			return err
		}
		select {
		case err := <-done:
			assert.Failf(t, "returned early", "%s: ReadToEnd returned on data, before the end: %v", end, err)
		case <-time.After(200 * time.Millisecond):
		}
		assert.Equal(t, "data", <-got, "%s: the bytes handed over", end)
		if end == "fin" {
			peer.(*net.TCPConn).CloseWrite()
		} else {
			c.Close()
		}
		select {
		case err := <-done:
			if end == "fin" {
				assert.NoError(t, err, "fin: ReadToEnd at the peer's end")
			} else {
				assert.ErrorIs(t, err, net.ErrClosed, "close: ReadToEnd at the socket's close")
			}
		case <-time.After(5 * time.Second):
			require.Failf(t, "no return", "%s: ReadToEnd still reading 5 s after the end", end)
		}
		return nil
	})
}

// TestTCPRelayMarksRewritten: where a rule of the namespace rewrites the
// marks of loopback packets, no relay passes the listener's filter:
// listenRelays says so at once (l7.Attach then fails and the proxy alone
// serves) instead of leaving each accepted connection to wait PairTimeout
// for a relay never made.
func TestTCPRelayMarksRewritten(t *testing.T) {
	ns := newNS(t)
	if testutil.InVM() {
		// The guests carry no nft: the filter's effect is what runs there
		// (TestTCPRelayRefusesStranger, TestTCPRelayBacklogFlood).
		t.Skip("a mark-rewriting rule needs nft, which the VM matrix's guests lack: tested on the host")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.SkipOrFail(t, "nft not installed (ci/deps.sh installs nftables)")
	}
	nft := ns.Command("nft", "-f", "-")
	nft.Stdin = strings.NewReader("table ip xdps_mark {\n\tchain out {\n\t\ttype route hook output priority mangle\n\t\tmeta mark set 1\n\t}\n}\n")
	out, err := nft.CombinedOutput()
	require.NoError(t, err, "nft: %s", out)
	require.NoError(t, ns.Do(func() error {
		tr, err := ListenTCPPairs()
		if err == nil {
			defer tr.Close()
			_, _, err := tr.Pair()
			assert.Failf(t, "listener made", "ListenTCPPairs with the marks rewritten = a listener (its next pair: %v), want an error", err)
		}
		return nil
	}))
}
