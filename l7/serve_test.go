package l7

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"xdpshield/internal/testutil"
	"xdpshield/internal/topo"
)

func TestSectionEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		sec  Section
		want bool
	}{
		{"empty", Section{}, false},
		{"listen only", Section{Listen: "198.18.0.1:80"}, true},
		{"fast_path only", Section{FastPath: "off"}, true},
		{"a rule only", Section{Config: Config{RBAC: []Rule{{Action: "deny"}}}}, true},
		{"set_header value only", Section{Config: Config{SetHeader: Header{Value: "x"}}}, true},
	} {
		if got := tc.sec.Enabled(); got != tc.want {
			t.Errorf("%s: Enabled() = %v, want %v", tc.name, got, tc.want)
		}
		// A section saying something is validated: none of these is whole.
		if err := tc.sec.Validate(); (err != nil) != tc.want {
			t.Errorf("%s: Validate() = %v, want an error %v", tc.name, err, tc.want)
		}
	}
	if s, err := Listen(Section{}, nil); s != nil || err != nil {
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
	if fastKernel() {
		saved := Kernels
		Kernels = nil
		t.Cleanup(func() { Kernels = saved })
	} else {
		t.Logf("a kernel Attach refuses: the real refusal, not a faked one")
	}

	sec := Section{Listen: "127.0.0.1:8080", Config: Config{
		Routes: []Route{{Name: "all", PathPrefix: "/", Backends: []string{b.addr}}},
		RBAC:   []Rule{{Name: "no-admin", Action: "deny", PathPrefix: "/admin"}},
	}}
	var s *Server
	if err := ns.Do(func() (err error) { s, err = Listen(sec, e.dial); return err }); err != nil {
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
