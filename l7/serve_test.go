package l7

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/l7/internal/sock"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// TestListenEmpty: a section that says nothing runs no proxy.
func TestListenEmpty(t *testing.T) {
	s, err := Listen(policy.Section{}, nil)
	assert.False(t, s != nil || err != nil, "Listen(empty) = %v, %v, want nil, nil", s, err)
}

// syncBuf is a log destination safe for the server's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServerWithoutFastPath: where the kernel cannot run the fast path (one
// not among Kernels: this one on the kernels Attach refuses, else none
// faked), Start serves the proxy alone, enforcing
// the whole policy, and Status and the log say why; an address already
// taken is an error of Listen, before anything is loaded.
func TestServerWithoutFastPath(t *testing.T) {
	testutil.Root(t)
	ns, err := topo.New("l7fb")
	require.NoError(t, err)
	t.Cleanup(func() { ns.Close() })
	e := &nsEnv{ns: ns}
	b := e.backend(t, "b1")
	opt := testOptions()
	if fastKernel() {
		opt.Kernels = [][2]int{} // none
	} else {
		t.Logf("a kernel Attach refuses: the real refusal, not a faked one")
	}

	sec := policy.Section{Listen: "127.0.0.1:8080", Config: policy.Config{
		Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b.addr}}},
		RBAC:   []policy.Rule{{Name: "no-admin", Action: "deny", PathPrefix: "/admin"}},
	}}
	var s *Server
	require.NoError(t, ns.Do(func() (err error) { s, err = Listen(sec, e.dial, WithFastPath(opt)); return err }), "Listen")
	err = ns.Do(func() error { _, err := Listen(sec, e.dial); return err })
	assert.ErrorContains(t, err, "l7: listen on 127.0.0.1:8080", "Listen on a taken address = %v, want a listen error", err)
	var logs syncBuf
	s.Start(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { s.Close() })

	c := e.client()
	for _, tc := range []struct {
		path string
		code int
	}{{"/x", 200}, {"/admin/y", 403}, {"/z", 200}} {
		resp, err := c.Get("http://127.0.0.1:8080" + tc.path)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.EqualValues(t, tc.code, resp.StatusCode, "GET %s = %d, want %d", tc.path, resp.StatusCode, tc.code)
	}
	n := b.hits.Load()
	assert.EqualValues(t, 2, n, "backend hits = %d, want 2 (the denied request never reaches it)", n)
	st, err := s.Status()
	require.NoError(t, err)
	assert.False(t, st.Fast || !strings.Contains(st.FastWhy, ErrKernelRefused.Error()) || st.Routes[0].Slow != 2 || st.Routes[0].Class[2] != 2 || st.Rules[0].Denied != 1, "Status() = %+v, want the proxy alone (kernel refused), 2 forwarded and answered 2xx, 1 denied", st)
	assert.Contains(t, logs.String(), "l7 proxy serving without the fast path", "log lacks the fallback:\n%s", logs.String())
	assert.NoError(t, s.Close(), "Close")
	_, err = c.Get("http://127.0.0.1:8080/x")
	assert.Error(t, err, "the proxy still answers after Close")
	assert.NoError(t, ns.Do(func() (err error) {
		s2, err := Listen(sec, e.dial)
		if err == nil {
			s2.Close()
		}
		return err
	}), "Listen after Close: want the address free again")
}

// TestServerRefusesLoop: Listen refuses a section whose route leads back to
// its own address, a policy change doing so is refused whole (counted,
// the generation unchanged, requests still served by the policy in
// force), and the namespace's addresses Listen reads are the namespace's.
func TestServerRefusesLoop(t *testing.T) {
	e := newNS(t)
	ns := e.ns
	b := e.backend(t, "b1")
	route := func(backend string) policy.Config {
		return policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{backend}}}}
	}
	loop := policy.Section{Listen: "0.0.0.0:8080", FastPath: "off", Config: route("127.0.0.1:8080")}
	err := ns.Do(func() error { _, err := Listen(loop, e.dial); return err })
	require.ErrorContains(t, err, "proxy's own l7.listen", "Listen(route to itself) = %v, want a loop refused", err)
	// 0.0.0.0 is both families to Go's Listen: [::1] reaches it too.
	loop6 := policy.Section{Listen: "0.0.0.0:8080", FastPath: "off", Config: route("[::1]:8080")}
	if err := ns.Do(func() error {
		ln, err := net.Listen("tcp", loop6.Listen)
		if err != nil {
			return err
		}
		defer ln.Close()
		c, err := net.DialTimeout("tcp", "[::1]:8080", 5*time.Second)
		if err != nil {
			return fmt.Errorf("listening on %s, dial [::1]:8080: %w", loop6.Listen, err)
		}
		return c.Close()
	}); err != nil {
		t.Logf("%v: the namespace has no IPv6 loopback", err)
	} else {
		assert.ErrorContains(t, ns.Do(func() error {
			s, err := Listen(loop6, e.dial)
			if s != nil {
				s.Close()
			}
			return err
		}), "proxy's own l7.listen", "Listen(%s, route to [::1]:8080): want a loop refused", loop6.Listen)
	}
	var local []netip.Addr
	ns.Do(func() error { local = sock.LocalAddrs(); return nil })
	assert.Contains(t, local, netip.MustParseAddr("127.0.0.1"), "sock.LocalAddrs() in the namespace = %v, want 127.0.0.1 among them", local)

	var s *Server
	sec := policy.Section{Listen: "0.0.0.0:8080", FastPath: "off", Config: route(b.addr)}
	require.NoError(t, ns.Do(func() (err error) { s, err = Listen(sec, e.dial); return err }), "Listen")
	s.Start(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { s.Close() })
	_, g, err := s.Replace(route("127.0.0.9:8080"))
	assert.False(t, !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "proxy's own l7.listen") || g != 1, "Replace(route to itself) = generation %d, %v, want generation 1 and the loop refused", g, err)
	// An address the namespace gained after Listen is the proxy's too.
	require.NoError(t, ns.AddAddr("lo", "198.18.9.9/32"))
	_, g, err = s.Replace(route("198.18.9.9:8080"))
	assert.False(t, !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "proxy's own l7.listen") || g != 1, "Replace(route to an address added since Listen) = generation %d, %v, want generation 1 and the loop refused", g, err)
	st, err := s.Status()
	assert.False(t, err != nil || st.Refused != 2 || st.Generation != 1, "Status() = refused %d generation %d, %v, want 2 and 1", st.Refused, st.Generation, err)
	resp, err := e.client().Get("http://127.0.0.1:8080/x")
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.False(t, resp.StatusCode != 200 || b.hits.Load() != 1, "GET /x after the refused change = %d, backend hits %d, want 200 and 1", resp.StatusCode, b.hits.Load())
}
