package l7

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/l7/internal/sock"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// TestListenEmpty: a section that says nothing runs no proxy.
func TestListenEmpty(t *testing.T) {
	if s, err := Listen(policy.Section{}, nil); s != nil || err != nil {
		t.Errorf("Listen(empty) = %v, %v, want nil, nil", s, err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
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
	if err := ns.Do(func() (err error) { s, err = Listen(sec, e.dial, WithFastPath(opt)); return err }); err != nil {
		t.Fatalf("Listen = %v", err)
	}
	if err := ns.Do(func() error { _, err := Listen(sec, e.dial); return err }); err == nil || !strings.Contains(err.Error(), "l7: listen on 127.0.0.1:8080") {
		t.Errorf("Listen on a taken address = %v, want a listen error", err)
	}
	var logs syncBuf
	s.Start(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { s.Close() })

	c := e.client()
	for _, tc := range []struct {
		path string
		code int
	}{{"/x", 200}, {"/admin/y", 403}, {"/z", 200}} {
		resp, err := c.Get("http://127.0.0.1:8080" + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("GET %s = %d, want %d", tc.path, resp.StatusCode, tc.code)
		}
	}
	if n := b.hits.Load(); n != 2 {
		t.Errorf("backend hits = %d, want 2 (the denied request never reaches it)", n)
	}
	st, err := s.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Fast || !strings.Contains(st.FastWhy, ErrKernelRefused.Error()) || st.Routes[0].Slow != 2 || st.Routes[0].Class[2] != 2 || st.Rules[0].Denied != 1 {
		t.Errorf("Status() = %+v, want the proxy alone (kernel refused), 2 forwarded and answered 2xx, 1 denied", st)
	}
	if !strings.Contains(logs.String(), "l7 proxy serving without the fast path") {
		t.Errorf("log lacks the fallback:\n%s", logs.String())
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if _, err := c.Get("http://127.0.0.1:8080/x"); err == nil {
		t.Error("the proxy still answers after Close")
	}
	if err := ns.Do(func() (err error) {
		s2, err := Listen(sec, e.dial)
		if err == nil {
			s2.Close()
		}
		return err
	}); err != nil {
		t.Errorf("Listen after Close = %v, want the address free again", err)
	}
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
	if err := ns.Do(func() error { _, err := Listen(loop, e.dial); return err }); err == nil || !strings.Contains(err.Error(), "proxy's own l7.listen") {
		t.Fatalf("Listen(route to itself) = %v, want a loop refused", err)
	}
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
	} else if err := ns.Do(func() error {
		s, err := Listen(loop6, e.dial)
		if s != nil {
			s.Close()
		}
		return err
	}); err == nil || !strings.Contains(err.Error(), "proxy's own l7.listen") {
		t.Errorf("Listen(%s, route to [::1]:8080) = %v, want a loop refused", loop6.Listen, err)
	}
	var local []netip.Addr
	ns.Do(func() error { local = sock.LocalAddrs(); return nil })
	if !slices.Contains(local, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("sock.LocalAddrs() in the namespace = %v, want 127.0.0.1 among them", local)
	}

	var s *Server
	sec := policy.Section{Listen: "0.0.0.0:8080", FastPath: "off", Config: route(b.addr)}
	if err := ns.Do(func() (err error) { s, err = Listen(sec, e.dial); return err }); err != nil {
		t.Fatalf("Listen = %v", err)
	}
	s.Start(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { s.Close() })
	if _, g, err := s.Replace(route("127.0.0.9:8080")); !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "proxy's own l7.listen") || g != 1 {
		t.Errorf("Replace(route to itself) = generation %d, %v, want generation 1 and the loop refused", g, err)
	}
	// An address the namespace gained after Listen is the proxy's too.
	if err := ns.AddAddr("lo", "198.18.9.9/32"); err != nil {
		t.Fatal(err)
	}
	if _, g, err := s.Replace(route("198.18.9.9:8080")); !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "proxy's own l7.listen") || g != 1 {
		t.Errorf("Replace(route to an address added since Listen) = generation %d, %v, want generation 1 and the loop refused", g, err)
	}
	if st, err := s.Status(); err != nil || st.Refused != 2 || st.Generation != 1 {
		t.Errorf("Status() = refused %d generation %d, %v, want 2 and 1", st.Refused, st.Generation, err)
	}
	resp, err := e.client().Get("http://127.0.0.1:8080/x")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || b.hits.Load() != 1 {
		t.Errorf("GET /x after the refused change = %d, backend hits %d, want 200 and 1", resp.StatusCode, b.hits.Load())
	}
}
