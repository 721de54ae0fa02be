package l7

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestFastPathCloseEndsRelays: a kept-alive connection read through its
// relay, still open when the data plane is closed, is closed by the proxy
// (it reads the relay's end) instead of waiting for requests that can no
// longer reach the relay.
func TestFastPathCloseEndsRelays(t *testing.T) {
	e := newNS(t)
	b := e.backend(t, "b")
	_, fp, addr := e.proxy(t, Config{Routes: []Route{{Name: "all", PathPrefix: "/", Backends: []string{b.addr}}}}, true)
	if !fp.Relay {
		t.Skip("no relay sockets on this kernel (TestAttachLoads says whether it should have them)")
	}
	c, err := e.dial(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, request("/x", 0, 0))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("first request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := fp.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = br.ReadByte()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("kept-alive connection after the data plane closed: read = %v, want the proxy's close", err)
	}
	t.Logf("read after Close: %v", err)
}

// TestTCPRelayRefusesStranger: a stranger without the relays' mark cannot
// connect to the TCP relays' listener at all (its filter), and a
// connection that is not the relay's own connecting socket (here one with
// the mark: a privileged process) is closed, never taken as a relay:
// pair's reading end is connected to its writing end, and the stranger
// reads the close.
func TestTCPRelayRefusesStranger(t *testing.T) {
	withRelays(t, func(tr *tcpRelays) error {
		if c, err := net.DialTimeout("tcp", sockaddrString(tr.addr), 500*time.Millisecond); err == nil {
			c.Close()
			t.Errorf("a stranger without the relays' mark connected to their listener, want its handshake dropped")
		}
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, relayMark)
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
		r, w, err := tr.pair()
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
		if !sameSockaddr(peer, local) {
			t.Errorf("pair: reading end's peer = %s, want the writing end %s (stranger %s)", sockaddrString(peer), sockaddrString(local), stranger.LocalAddr())
		}
		if tr.strangers != 1 {
			t.Errorf("strangers = %d, want 1", tr.strangers)
		}
		stranger.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := stranger.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("stranger's read = %v, want the listener's close", err)
		}
		if _, err := unix.Write(w, []byte("x")); err != nil {
			return err
		}
		if err := waitFD(r, unix.POLLIN, time.Now().Add(5*time.Second)); err != nil {
			return fmt.Errorf("relay read: %w", err)
		}
		buf := make([]byte, 2)
		if n, err := unix.Read(r, buf); err != nil {
			t.Errorf("relay read = %v, want \"x\"", err)
		} else if string(buf[:n]) != "x" {
			t.Errorf("relay read = %q, want \"x\"", buf[:n])
		}
		return nil
	})
}

// withRelays runs f on a TCP relays' listener in a namespace of its own.
func withRelays(t *testing.T, f func(tr *tcpRelays) error) {
	t.Helper()
	e := newNS(t)
	if err := e.ns.Do(func() error {
		tr, err := listenRelays()
		if err != nil {
			return err
		}
		defer tr.close()
		return f(tr)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTCPRelayBacklogFlood: any local process in the namespace, of any
// user, can connect to the TCP relays' listener and leave its connections
// unaccepted. Once they fill the accept queue the kernel drops the SYN of
// a relay's own connecting socket, so without a guard no relay could be
// made while they stay there: each accepted client connection would wait
// relayTimeout (under the FastPath's policy lock) and go without its
// relay. pair still makes its relay with the queue full of strangers.
func TestTCPRelayBacklogFlood(t *testing.T) {
	withRelays(t, func(tr *tcpRelays) error {
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
		r, w, err := tr.pair()
		if err != nil {
			t.Errorf("pair with the accept queue full of strangers = %v, want a relay", err)
			return nil
		}
		unix.Close(r)
		unix.Close(w)
		return nil
	})
}

// TestAwaitEnd: awaitEnd neither reads nor returns on data (the poller
// wakes it; it goes back to waiting), returns at the peer's FIN with the
// data still queued, and returns when the connection is closed under it.
func TestAwaitEnd(t *testing.T) {
	e := newNS(t)
	if err := e.ns.Do(func() error {
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
			done := make(chan struct{})
			go func() { awaitEnd(c); close(done) }()
			if _, err := peer.Write([]byte("data")); err != nil {
				return err
			}
			select {
			case <-done:
				t.Errorf("%s: awaitEnd returned on data, before the end", end)
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
				t.Fatalf("%s: awaitEnd still waiting 5 s after the end", end)
			}
			if end == "fin" {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if b, err := io.ReadAll(c); string(b) != "data" {
					t.Errorf("fin: read after awaitEnd = %q, %v, want the data it left queued", b, err)
				}
				c.Close()
			}
			peer.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTCPRelayMarksRewritten: where a rule of the namespace rewrites the
// marks of loopback packets, no relay passes the listener's filter:
// listenRelays says so at once (Attach then fails and the proxy alone
// serves) instead of leaving each accepted connection to wait relayTimeout
// for a relay never made.
func TestTCPRelayMarksRewritten(t *testing.T) {
	e := newNS(t)
	if testutil.InVM() {
		// The guests carry no nft: the filter's effect is what runs there
		// (TestTCPRelayRefusesStranger, TestTCPRelayBacklogFlood).
		t.Skip("a mark-rewriting rule needs nft, which the VM matrix's guests lack: tested on the host")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.SkipOrFail(t, "nft not installed (ci/deps.sh installs nftables)")
	}
	nft := e.ns.Command("nft", "-f", "-")
	nft.Stdin = strings.NewReader("table ip xdps_mark {\n\tchain out {\n\t\ttype route hook output priority mangle\n\t\tmeta mark set 1\n\t}\n}\n")
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	if err := e.ns.Do(func() error {
		tr, err := listenRelays()
		if err == nil {
			defer tr.close()
			_, _, err := tr.pair()
			t.Errorf("listenRelays with the marks rewritten = a listener (its next pair: %v), want an error", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
