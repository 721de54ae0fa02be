package l7

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// nsEnv is a throwaway namespace with dial and listen inside it.
type nsEnv struct {
	ns *topo.NS
	// mu orders dials (a pool fill may still dial when a test ends)
	// before the namespace's cleanup; closed: cleaned up.
	mu     sync.RWMutex
	closed bool
}

func newNS(t testing.TB) *nsEnv { return newNSRole(t, "l7") }

// newNSRole is newNS naming the namespace by role: tests running several
// at once give each its own.
func newNSRole(t testing.TB, role string) *nsEnv {
	t.Helper()
	testutil.Root(t)
	ns, err := topo.New(role)
	require.NoError(t, err, "topo.New")
	e := &nsEnv{ns: ns}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.closed = true
		ns.Close()
	})
	return e
}

func (e *nsEnv) listen(t testing.TB) net.Listener {
	t.Helper()
	var l net.Listener
	require.NoError(t, e.ns.Do(func() (err error) {
		l, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}))
	t.Cleanup(func() { l.Close() })
	return l
}

func (e *nsEnv) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, fmt.Errorf("dial %s: the test's namespace is gone", addr)
	}
	var c net.Conn
	err := e.ns.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// nsBackend serves in the namespace what newBackend serves.
type nsBackend struct {
	name string
	addr string
	hits atomic.Int64

	inflight atomic.Int64 // requests being served
	conns    atomic.Int64 // connections accepted
	mu       sync.Mutex
	got      []string // what it received, one line a request (receipt)
}

// quiet waits up to d until b serves no request (a receipt is written
// once its body is read, when the body ends or its connection closes).
func (b *nsBackend) quiet(d time.Duration) {
	for deadline := time.Now().Add(d); b.inflight.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// received returns what b received since the n-th request.
func (b *nsBackend) received(n int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.got[min(n, len(b.got)):]...)
}

// incomplete starts the receipt of a request whose body never came whole.
const incomplete = "(incomplete) "

// receipt is what a backend received of r: method, request-target,
// every header but those of the connection's transport, and the body.
func receipt(r *http.Request, body []byte) string {
	var hs []string
	for k, v := range r.Header {
		hs = append(hs, k+": "+strings.Join(v, ","))
	}
	sort.Strings(hs)
	return fmt.Sprintf("%s %s host=%q %s body=%q", r.Method, r.RequestURI, r.Host, strings.Join(hs, "; "), body)
}

func (e *nsEnv) backend(t testing.TB, name string) *nsBackend {
	t.Helper()
	b := &nsBackend{name: name}
	l := e.listen(t)
	b.addr = l.Addr().String()
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		b.inflight.Add(1)
		defer b.inflight.Add(-1)
		body, err := io.ReadAll(r.Body)
		rc := receipt(r, body)
		if err != nil {
			rc = incomplete + rc
		}
		b.mu.Lock()
		b.got = append(b.got, rc)
		b.mu.Unlock()
		w.Header().Set("X-Backend", name)
		switch {
		case r.Method == "GET" && r.URL.Path == "/slow":
			time.Sleep(300 * time.Millisecond) // issue 24's order repro
		case r.URL.Path == "/close":
			w.Header().Set("Connection", "close") // finding 7
		}
		fmt.Fprintf(w, "%s %s %s user=%q set=%q body=%q", name, r.Method, r.RequestURI, r.Header.Get("X-User"), r.Header.Get("X-Set"), body)
	}), ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			b.conns.Add(1)
		}
	}}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return b
}

// proxy starts the proxy for cfg in the namespace, with the fast path when
// fast is set (on a kernel Attach refuses, the test is skipped once the
// refusal is checked: needFast).
func (e *nsEnv) proxy(t testing.TB, cfg policy.Config, fast bool) (*Proxy, *FastPath, string) {
	t.Helper()
	var opt *Options
	if fast {
		needFast(t)
		o := fastOptions(t)
		opt = &o
	}
	return e.proxyWith(t, cfg, opt)
}

// proxyWith is proxy with the fast path attached with opt (nil: none).
func (e *nsEnv) proxyWith(t testing.TB, cfg policy.Config, opt *Options) (*Proxy, *FastPath, string) {
	t.Helper()
	p, err := policy.Compile(cfg)
	require.NoError(t, err, "Compile")
	px := NewProxy(p, e.dial)
	var fp *FastPath
	if opt != nil {
		fp, err = Attach(px, nil, *opt)
		require.NoError(t, err, "Attach")
		t.Cleanup(func() { fp.Close() })
	}
	l := e.listen(t)
	s := px.Server()
	go px.Serve(s, l)
	t.Cleanup(func() { s.Close() })
	return px, fp, l.Addr().String()
}

func (e *nsEnv) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: e.dial, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true}}
}

func TestFastPathServes(t *testing.T) {
	e := newNS(t)
	b1, b2 := e.backend(t, "b1"), e.backend(t, "b2")
	_, fp, addr := e.proxy(t, policy.Config{
		Routes:     []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b1.addr, b2.addr}}},
		RBAC:       []policy.Rule{{Action: "deny", PathPrefix: "/admin"}},
		HashHeader: "X-User",
	}, true)
	c := e.client()
	const n = 20
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
		req.Header.Set("X-User", "alice")
		resp, err := c.Do(req)
		require.NoError(t, err, "request %d", i)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.False(t, resp.StatusCode != 200 || !strings.Contains(string(body), "GET /x user=\"alice\""), "request %d = %d %q", i, resp.StatusCode, body)
	}
	cnt, err := fp.Counters()
	require.NoError(t, err)
	t.Logf("counters %+v hits %d %d", cnt, b1.hits.Load(), b2.hits.Load())
	got := b1.hits.Load() + b2.hits.Load()
	assert.EqualValues(t, n, got, "backends saw %d requests, want %d", got, n)
	// The first request is a miss; a request sent before the proxy's idle
	// hook gave the connection back is busy (a race the client can win).
	assert.False(t, cnt.Reasons[ReasonFast]+cnt.Slow() != n || cnt.Reasons[ReasonFast] < n/2 || cnt.Reasons[ReasonMiss] != 1, "fast %d, slow %d (miss %d) of %d requests, want one miss and most fast", cnt.Reasons[ReasonFast], cnt.Slow(), cnt.Reasons[ReasonMiss], n)
}

// TestFastPathBackendGoes: a backend closing its pooled sockets (it went
// away) leaves the client's next request to the proxy, which answers as it
// would alone (502), within a bound: nothing hangs.
func TestFastPathBackendGoes(t *testing.T) {
	e := newNS(t)
	l := e.listen(t)
	addr := l.Addr().String()
	var hits atomic.Int64
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok")
	})}
	go s.Serve(l)
	_, fp, paddr := e.proxy(t, policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{addr}}}}, true)
	c := e.client()
	do := func() (int, error) {
		resp, err := c.Get("http://" + paddr + "/x")
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for i := 0; i < 5; i++ {
		st, err := do()
		require.False(t, err != nil || st != 200, "request %d = %d, %v", i, st, err)
		// The client's next request races the proxy's idle hook
		// giving the connection back to the kernel (busy otherwise:
		// all 4 of them once in a loaded run of the package).
		time.Sleep(10 * time.Millisecond)
	}
	cnt, _ := fp.Counters()
	require.NotZero(t, cnt.Reasons[ReasonFast], "no request took the fast path before the backend went: %+v", cnt)
	s.Close() // closes the listener and every connection, the pooled one too
	start := time.Now()
	st, err := do()
	require.False(t, err != nil || st != http.StatusBadGateway, "after the backend went: %d, %v; want 502", st, err)
	el := time.Since(start)
	assert.False(t, el > 5*time.Second, "answer after the backend went took %v", el)
	after, _ := fp.Counters()
	t.Logf("before %v after %v", cnt.Reasons, after.Reasons)
}

// mapLen counts a map's entries.
func mapLen(t testing.TB, m interface {
	Iterate() *ebpf.MapIterator
}) int {
	t.Helper()
	var k, v []byte
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	require.NoError(t, it.Err(), "iterate")
	return n
}

// TestFastPathManyConns: concurrent kept-alive connections all get their
// answers through the fast path, and once the clients close, the state of
// every connection and its pooled sockets is gone from the maps.
func TestFastPathManyConns(t *testing.T) {
	e := newNS(t)
	b1, b2 := e.backend(t, "b1"), e.backend(t, "b2")
	_, fp, addr := e.proxy(t, policy.Config{
		Routes:     []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b1.addr, b2.addr}}},
		HashHeader: "X-User",
	}, true)
	const conns, reqs = 200, 5
	lat, _ := e.load(t, addr, conns, reqs, 0, false) // closes its connections
	require.EqualValues(t, conns*reqs, len(lat), "%d answers, want %d", len(lat), conns*reqs)
	got := b1.hits.Load() + b2.hits.Load()
	assert.EqualValues(t, conns*reqs, got, "backends saw %d requests, want %d", got, conns*reqs)
	cnt, err := fp.Counters()
	require.NoError(t, err)
	// Each connection's first request is a miss and, under this load, often
	// its second finds the proxy still filling the pool (busy): counted,
	// not bounded here.
	assert.False(t, cnt.Reasons[ReasonFast]+cnt.Slow() != conns*reqs || cnt.Reasons[ReasonFast] == 0, "fast %d + slow %d, want %d requests, some fast", cnt.Reasons[ReasonFast], cnt.Slow(), conns*reqs)
	// Every reason that counted, so a shortfall says where it went
	// (7.2, before the parser's scratch was the connection's own: fast
	// 574 + slow 422, sticky 1 and sticky_more 4: a GET judged
	// unframable, its copy overwritten mid-parse).
	var by []string
	for r, n := range cnt.Reasons {
		if n != 0 {
			by = append(by, fmt.Sprintf("%s %d", Reason(r), n))
		}
	}
	t.Logf("fast %d, slow %d (%s)", cnt.Reasons[ReasonFast], cnt.Slow(), strings.Join(by, ", "))
	deadline := time.Now().Add(10 * time.Second)
	// (7.2, before sock.ReadToEnd: conns/ctls/pool/peer held [1 1 1 1]
	// at times, one relay's watcher never woken by its client's end.)
	var left [5]int
	for {
		left = [5]int{mapLen(t, fp.objs.Conns), mapLen(t, fp.objs.Ctls), mapLen(t, fp.objs.Pool), mapLen(t, fp.objs.Peer),
			mapLen(t, fp.objs.Scratch)}
		if left == [5]int{} || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.EqualValues(t, [5]int{}, left, "after the clients closed, conns/ctls/pool/peer/scratch hold %v entries, want none", left)
}

// TestFastPathFullTable: a connection the data plane cannot take (here its
// table of connections full) is served by the proxy alone, answered as
// ever, and counted (unjoined: shield_l7_fast_path_unjoined_total), not
// lost in a debug log; once the table has room, the next connection joins.
func TestFastPathFullTable(t *testing.T) {
	e := newNS(t)
	b := e.backend(t, "b1")
	_, fp, addr := e.proxy(t, policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b.addr}}}}, true)
	// Fill conns with cookies no socket has (cookies count up from 1).
	n := int(fp.objs.Conns.MaxEntries())
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = 1<<62 + uint64(i)
	}
	put, err := fp.objs.Conns.BatchUpdate(keys, make([]bpf.L7Conn, n), nil)
	require.NoError(t, err, "fill conns")
	require.Equal(t, n, put, "fill conns")
	get := func() {
		t.Helper()
		c := e.client()
		defer c.CloseIdleConnections()
		resp, err := c.Get("http://" + addr + "/x")
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	before, err := fp.Counters()
	require.NoError(t, err)
	get()
	after, err := fp.Counters()
	require.NoError(t, err)
	assert.EqualValues(t, 1, fp.unjoined.Load(), "connections the full table could not take")
	assert.Equal(t, before.Reasons, after.Reasons, "the kernel judged a request of a connection it never took")
	deleted, err := fp.objs.Conns.BatchDelete(keys, nil)
	require.NoError(t, err, "empty conns")
	require.Equal(t, n, deleted, "empty conns")
	get()
	after, err = fp.Counters()
	require.NoError(t, err)
	assert.EqualValues(t, 1, fp.unjoined.Load(), "with room again, the next connection joins")
	assert.EqualValues(t, 1, after.Reasons[ReasonMiss]-before.Reasons[ReasonMiss], "the kernel's first request of the joined connection is a miss")
}
