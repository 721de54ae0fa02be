package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// guard is the API's listener: at most max connections at a time (past it
// new ones wait in the kernel's backlog), at most perPeer of them from one
// peer (a peer's extra connection is closed at once), and past
// max-reserved connections without the token a new one is on probation:
// its first request must carry the token (gate).
//
// Issue 23, finding 3: as nobody, 64 keep-alive connections each sending a
// request every 50 s held every slot, and the operator's requests waited
// in the backlog for over a minute.
type guard struct {
	net.Listener
	max, perPeer, reserved int
	key                    func(net.Conn) string
	log                    *slog.Logger

	sem  chan struct{}
	once sync.Once
	done chan struct{}

	diagOnce sync.Once // warned that loopback peers are told apart by address only

	mu      sync.Mutex
	anon    int            // open connections not (yet) authenticated
	peers   map[string]int // open connections per peer
	refused int            // connections closed over perPeer since the last log line
	logged  time.Time
}

func newGuard(ln net.Listener, log *slog.Logger) *guard {
	return newGuardSized(ln, log, MaxConns, PerPeer, Reserved, peerKey)
}

func newGuardSized(ln net.Listener, log *slog.Logger, max, perPeer, reserved int, key func(net.Conn) string) *guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &guard{Listener: ln, max: max, perPeer: perPeer, reserved: reserved, key: key, log: log,
		sem: make(chan struct{}, max), done: make(chan struct{}), peers: map[string]int{}}
}

func (g *guard) Accept() (net.Conn, error) {
	for {
		select {
		case g.sem <- struct{}{}:
		case <-g.done:
			return nil, net.ErrClosed
		}
		c, err := g.Listener.Accept()
		if err != nil {
			<-g.sem
			return nil, err
		}
		k := g.key(c)
		if noDiag.Load() {
			g.diagOnce.Do(func() {
				g.log.Warn("api: the kernel does not say who owns a loopback connection (sock_diag: inet_diag, tcp_diag); " +
					"local users share one per-peer bound on loopback TCP; the admin socket still tells them apart")
			})
		}
		g.mu.Lock()
		if g.peers[k] >= g.perPeer {
			g.refused++
			n, logNow := g.refused, time.Since(g.logged) >= 10*time.Second
			if logNow {
				g.refused, g.logged = 0, time.Now()
			}
			g.mu.Unlock()
			c.Close()
			<-g.sem
			if logNow {
				g.log.Warn("api: connections over the per-peer bound closed", "peer", k, "bound", g.perPeer, "closed", n)
			}
			continue
		}
		g.peers[k]++
		probation := g.anon >= g.max-g.reserved
		g.anon++
		g.mu.Unlock()
		return &guardConn{Conn: c, g: g, peer: k, probation: probation}, nil
	}
}

func (g *guard) Close() error {
	g.once.Do(func() { close(g.done) })
	return g.Listener.Close()
}

// guardConn is a connection the guard counts until it is closed.
type guardConn struct {
	net.Conn
	g         *guard
	peer      string
	probation bool // accepted with the anonymous share full

	mu     sync.Mutex
	authed bool
	closed bool
}

// authenticate moves the connection to the authenticated share.
func (c *guardConn) authenticate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.authed || c.closed {
		return
	}
	c.authed = true
	c.g.mu.Lock()
	c.g.anon--
	c.g.mu.Unlock()
}

func (c *guardConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return err
	}
	c.closed = true
	c.g.mu.Lock()
	if !c.authed {
		c.g.anon--
	}
	if c.g.peers[c.peer]--; c.g.peers[c.peer] <= 0 {
		delete(c.g.peers, c.peer)
	}
	c.g.mu.Unlock()
	<-c.g.sem
	return err
}

type guardConnKey struct{}

// gate marks a connection whose request carries the token as
// authenticated (it keeps a reserved slot), and answers a request without
// the token on a connection accepted on probation with 503, closing it.
func gate(h http.Handler, authenticated func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(guardConnKey{}).(*guardConn)
		if c != nil {
			if authenticated(r) {
				c.authenticate()
			} else if c.probation {
				c.mu.Lock()
				authed := c.authed
				c.mu.Unlock()
				if !authed {
					w.Header().Set("Connection", "close")
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					fmt.Fprintln(w, `{"error":"the API is busy: only requests with the operator token are served now"}`)
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// peerKey names who is at the other end of c: on loopback TCP and on a
// unix socket the user (the kernel's socket credentials), else the
// address (an IPv6 /64, which one host usually holds whole).
func peerKey(c net.Conn) string {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		ip := a.AddrPort().Addr().Unmap()
		if ip.IsLoopback() {
			if uid, err := loopbackUID(c); err == nil {
				return fmt.Sprintf("uid %d", uid)
			}
			noDiag.Store(true)
		}
		if ip.Is6() {
			p, _ := ip.Prefix(64)
			return p.String()
		}
		return ip.String()
	case *net.UnixAddr:
		if uid, err := unixPeerUID(c); err == nil {
			return fmt.Sprintf("uid %d", uid)
		}
		return "unix"
	}
	return c.RemoteAddr().String()
}

// noDiag is set when sock_diag could not name a loopback peer's owner.
var noDiag atomic.Bool

// loopbackUID is the owner of the client's end of a loopback TCP
// connection, as sock_diag reports it (the socket's creator).
func loopbackUID(c net.Conn) (uint32, error) {
	s, err := netlink.SocketGet(c.RemoteAddr(), c.LocalAddr())
	if err != nil {
		return 0, err
	}
	return s.UID, nil
}

// unixPeerUID is SO_PEERCRED's uid of a unix socket's peer.
func unixPeerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return cred.Uid, nil
}
