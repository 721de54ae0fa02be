package lb

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/lb/cgroup2"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// The test topology: a client namespace (the balanced process's sockets)
// and a server namespace (backends, and a decoy holding the VIPs so that
// an untranslated connect has somewhere to land and says so).
var (
	clientAddr4 = netip.MustParseAddr("198.18.0.1")
	clientAddr6 = netip.MustParseAddr("2001:db8::1")
	vip4        = netip.MustParseAddr("198.18.0.100")
	vip6        = netip.MustParseAddr("2001:db8::100")
)

const backendPort = 8080

func backendAddrs(v6 bool, n int) []netip.AddrPort {
	var out []netip.AddrPort
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)})
		if v6 {
			a = netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", 0x10+i))
		}
		out = append(out, netip.AddrPortFrom(a, backendPort))
	}
	return out
}

type env struct {
	lb      *LB
	client  *topo.NS
	server  *topo.NS
	cgroup  string // the attached cgroup v2 directory the test process is in
	sibling string // a cgroup beside it, not attached
	outer   string // the test process's own cgroup, to return to
}

// newEnv builds the namespaces, mounts a private cgroup2 hierarchy, makes a
// throwaway cgroup, moves the test process into it, loads and attaches the
// balancer. Everything is undone at cleanup, in reverse.
func newEnv(t *testing.T, nBackends int) *env {
	t.Helper()
	return newEnvOpts(t, nBackends, Options{ReverseSize: lbconf.DefaultReverseSize})
}

// newEnvOpts is newEnv with load options of its own.
func newEnvOpts(t *testing.T, nBackends int, opts Options) *env {
	t.Helper()
	testutil.Root(t)
	if _, err := topo.CleanupStale(); err != nil {
		t.Logf("stale namespaces: %v", err)
	}
	e := &env{}
	var err error
	e.client, err = topo.New("lbc")
	require.NoError(t, err)
	t.Cleanup(func() { e.client.Close() })
	e.server, err = topo.New("lbs")
	require.NoError(t, err)
	t.Cleanup(func() { e.server.Close() })
	require.NoError(t, topo.Veth(e.client, "c0", e.server, "s0"))
	must := func(err error) {
		t.Helper()
		require.NoError(t, err)
	}
	must(e.client.AddAddr("c0", clientAddr4.String()+"/24"))
	must(e.client.AddAddr("c0", clientAddr6.String()+"/64"))
	must(e.server.AddAddr("s0", vip4.String()+"/24"))
	must(e.server.AddAddr("s0", vip6.String()+"/64"))
	for _, v6 := range []bool{false, true} {
		for _, b := range backendAddrs(v6, nBackends) {
			bits := 24
			if v6 {
				bits = 64
			}
			must(e.server.AddAddr("s0", fmt.Sprintf("%s/%d", b.Addr(), bits)))
		}
	}
	// Backends answer on every backend address; the decoy on the VIPs.
	for _, v6 := range []bool{false, true} {
		for _, b := range backendAddrs(v6, nBackends) {
			e.serve(t, "B", b)
		}
	}
	for _, v := range []netip.Addr{vip4, vip6} {
		e.serve(t, "D", netip.AddrPortFrom(v, 80))
		e.serve(t, "D", netip.AddrPortFrom(v, 81))
	}

	// A private cgroup2 mount: this host mounts only cgroup v1 hierarchies
	// at /sys/fs/cgroup, and the guest's mount is not ours to use.
	mnt := t.TempDir()
	must(cgroup2.Mount(mnt))
	t.Cleanup(func() {
		assert.NoError(t, unix.Unmount(mnt, unix.MNT_DETACH), "unmount %s", mnt)
	})
	own, err := ownCgroup()
	must(err)
	e.outer = filepath.Join(mnt, own)
	// base/in is attached and holds the test process; base/out, its
	// sibling, holds the processes that must not be translated.
	base := filepath.Join(mnt, fmt.Sprintf("%slb-%d", topo.Prefix, os.Getpid()))
	e.cgroup, e.sibling = filepath.Join(base, "in"), filepath.Join(base, "out")
	for _, d := range []string{base, e.cgroup, e.sibling} {
		must(os.Mkdir(d, 0o755))
		t.Cleanup(func() {
			assert.NoError(t, os.Remove(d), "remove cgroup")
		})
	}
	must(moveSelf(e.cgroup))
	t.Cleanup(func() {
		assert.NoError(t, moveSelf(e.outer), "leave cgroup")
	})

	e.lb, err = Load(opts)
	must(err)
	t.Cleanup(func() { e.lb.Close() })
	must(e.lb.Attach(e.cgroup))
	return e
}

// ownCgroup is the test process's cgroup v2 path ("0::/path").
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// moveSelf moves the whole test process into cgroup dir. Sockets take the
// cgroup of the process creating them, at creation.
func moveSelf(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(os.Getpid())), 0o644)
}

// serve runs a TCP and a UDP responder on a in the server namespace: each
// request line (or datagram) gets "KIND LOCAL REMOTE\n".
func (e *env) serve(t *testing.T, kind string, a netip.AddrPort) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := e.server.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp", a.String()); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", a.String())
		return err
	})
	require.NoError(t, err)
	testutil.AnswerLines(t, ln, func(c net.Conn) string {
		return fmt.Sprintf("%s %s %s", kind, c.LocalAddr(), c.RemoteAddr())
	})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(fmt.Appendf(nil, "%s %s %s\n", kind, pc.LocalAddr(), from), from)
		}
	}()
}

// reply is a responder's answer.
type reply struct {
	kind   string // "B" backend, "D" decoy
	local  netip.AddrPort
	remote netip.AddrPort
}

func parseReply(s string) (reply, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return reply{}, fmt.Errorf("reply %q: want 3 fields", s)
	}
	l, err := netip.ParseAddrPort(f[1])
	if err != nil {
		return reply{}, fmt.Errorf("reply %q: %w", s, err)
	}
	r, err := netip.ParseAddrPort(f[2])
	if err != nil {
		return reply{}, fmt.Errorf("reply %q: %w", s, err)
	}
	return reply{kind: f[0], local: unmap(l), remote: unmap(r)}, nil
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

// conn is a client TCP connection made in the client namespace.
type conn struct {
	*net.TCPConn
	r *bufio.Reader
}

// dial connects to dst from the client namespace; src, when valid, binds
// the socket first (the Maglev key). The socket closes with RST (linger 0)
// so that thousands of dials leave no TIME_WAIT behind.
func (e *env) dial(dst, src netip.AddrPort) (*conn, error) {
	var c net.Conn
	err := e.client.Do(func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		if src.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(src)
		}
		var err error
		c, err = d.Dial("tcp", dst.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	tc.SetLinger(0)
	return &conn{TCPConn: tc, r: bufio.NewReader(tc)}, nil
}

// ask sends one request line and reads the answer.
func (c *conn) ask() (reply, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("?\n")); err != nil {
		return reply{}, err
	}
	s, err := c.r.ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	return parseReply(s)
}

// peer is what getpeername(2) says on the socket.
func (c *conn) peer() (netip.AddrPort, error) {
	var sa unix.Sockaddr
	var serr error
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	if err := rc.Control(func(fd uintptr) { sa, serr = unix.Getpeername(int(fd)) }); err != nil {
		return netip.AddrPort{}, err
	}
	if serr != nil {
		return netip.AddrPort{}, serr
	}
	return sockaddrAddr(sa), nil
}

func sockaddrAddr(sa unix.Sockaddr) netip.AddrPort {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(s.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(s.Addr), uint16(s.Port))
	}
	return netip.AddrPort{}
}

// ask1 dials dst, asks once and closes.
func (e *env) ask1(dst, src netip.AddrPort) (reply, error) {
	c, err := e.dial(dst, src)
	if err != nil {
		return reply{}, err
	}
	defer c.Close()
	return c.ask()
}
