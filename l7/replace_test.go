package l7

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// trackedBackend is an HTTP backend in the namespace that counts its
// requests and its open connections.
type trackedBackend struct {
	name  string
	addr  string
	hits  atomic.Int64
	conns atomic.Int64 // open connections
}

func (e *nsEnv) trackedBackend(t *testing.T, name string) *trackedBackend {
	t.Helper()
	b := &trackedBackend{name: name}
	l := e.listen(t)
	b.addr = l.Addr().String()
	s := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.hits.Add(1)
			io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%s %s", name, r.URL.Path)
		}),
		ConnState: func(c net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				b.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				b.conns.Add(-1)
			}
		},
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return b
}

// server runs a Server for cfg in the namespace on 127.0.0.1:8080, with
// the fast path unless fastOff.
func (e *nsEnv) server(t *testing.T, cfg policy.Config, fastOff bool) (*Server, *syncBuf) {
	t.Helper()
	sec := policy.Section{Listen: "127.0.0.1:8080", Config: cfg}
	if fastOff {
		sec.FastPath = "off"
	}
	opt := fastOptions(t)
	var s *Server
	require.NoError(t, e.ns.Do(func() (err error) { s, err = Listen(sec, e.dial, WithFastPath(opt)); return err }), "Listen")
	logs := &syncBuf{}
	s.Start(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { s.Close() })
	if !fastOff {
		st, err := s.Status()
		require.False(t, err != nil || !st.Fast || !st.KernelPolicy, "Status() = %+v, %v, want the fast path holding the policy", st, err)
	}
	return s, logs
}

// getPath sends GET path on c and returns the status and the body.
func getPath(c *http.Client, path string) (int, string, error) {
	resp, err := c.Get("http://127.0.0.1:8080" + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// Two policies that differ in rules and routes at once, so that a request
// judged by parts of both gets an answer neither gives:
//
//	policy A: deny /b; route "all" / -> b1
//	policy B: deny /a; route "all" / -> b2, route "a" /a -> b3
//
// /a is 200 from b1 (A) or 403 (B); A's rules with B's routes would send it
// to b3. /b is 403 (A) or 200 from b2 (B); B's rules with A's routes would
// send it to b1, and A's rules with B's ring (route 0) would send /a to b2.
func twoPolicies(b1, b2, b3 string) (a, b policy.Config) {
	a = policy.Config{
		Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b1}}},
		RBAC:   []policy.Rule{{Name: "no-b", Action: "deny", PathPrefix: "/b"}},
	}
	b = policy.Config{
		Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b2}},
			{Name: "a", PathPrefix: "/a", Backends: []string{b3}}},
		RBAC: []policy.Rule{{Name: "no-a", Action: "deny", PathPrefix: "/a"}},
	}
	return a, b
}

// replaceSetup starts three tracked backends and a server whose fast path
// holds policy A of twoPolicies; it returns them with both policies.
func replaceSetup(t *testing.T) (*nsEnv, [3]*trackedBackend, policy.Config, policy.Config, *Server) {
	e := newNS(t)
	needFast(t)
	b := [3]*trackedBackend{e.trackedBackend(t, "b1"), e.trackedBackend(t, "b2"), e.trackedBackend(t, "b3")}
	pa, pb := twoPolicies(b[0].addr, b[1].addr, b[2].addr)
	s, _ := e.server(t, pa, false)
	return e, b, pa, pb, s
}

// answer is what one policy answers to a path: "403" or the backend's name.
func answerOf(policyA bool, path string) string {
	switch {
	case policyA && path == "/a", !policyA && path == "/b":
		if policyA {
			return "b1"
		}
		return "b2"
	}
	return "403"
}

func answerText(code int, body string) string {
	if code == http.StatusForbidden {
		return "403"
	}
	name, _, _ := strings.Cut(body, " ")
	return name
}

// TestReplaceUnderLoad changes the policy back and forth while 8 kept-alive
// connections send requests without pause: every request succeeds; each
// answer is the whole of policy A or the whole of policy B (never A's
// rules with B's routes, or B's ring); a request sent and answered between
// two changes follows the policy in force; and after the last change
// requests follow it through the kernel (its fast counts rise) and through
// the proxy (requests on connections the kernel hands over for good).
func TestReplaceUnderLoad(t *testing.T) {
	e, b, pa, pb, s := replaceSetup(t)
	b1, b2, b3 := b[0], b[1], b[2]

	// phase is even while no change runs (generation phase/2+1 in
	// force) and odd while one does (from generation (phase+1)/2 to the
	// next): each request reads it before it is sent and after its
	// answer, which tells the generations that may have judged it.
	var phase atomic.Uint64
	policyA := func(g uint64) bool { return g%2 == 1 }

	const conns, changes = 8, 10
	// perPhase requests must be answered with no change under way
	// between two changes (and before the first, after the last): the
	// pace follows what was answered, not an assumed speed.
	const perPhase = 40
	var quietDone [2*changes + 1]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	type result struct {
		path   string
		p0, p1 uint64
		answer string
		err    error
	}
	results := make([][]result, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.client()
			defer c.Transport.(*http.Transport).CloseIdleConnections()
			for k := 0; !stop.Load() && k < 20000; k++ {
				path := []string{"/a", "/b"}[k%2]
				p0 := phase.Load()
				code, body, err := getPath(c, path)
				p1 := phase.Load()
				results[i] = append(results[i], result{path, p0, p1, answerText(code, body), err})
				if p0 == p1 && p0%2 == 0 && err == nil {
					quietDone[p0].Add(1)
				}
			}
		}()
	}
	finish := func() {
		stop.Store(true)
		wg.Wait()
	}
	waitQuiet := func(ph uint64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for quietDone[ph].Load() < perPhase {
			if time.Now().After(deadline) {
				finish()
				require.Failf(t, "no progress", "phase %d: %d requests answered in 60 s with no change under way, want %d", ph, quietDone[ph].Load(), perPhase)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitQuiet(0)
	var longest time.Duration
	for k := 0; k < changes; k++ {
		next := pb
		if k%2 == 1 {
			next = pa
		}
		phase.Add(1)
		start := time.Now()
		_, g, err := s.Replace(next)
		longest = max(longest, time.Since(start))
		ph := phase.Add(1)
		if err != nil {
			finish()
			require.NoError(t, err, "Replace #%d", k)
		}
		assert.EqualValues(t, uint64(k+2), g, "Replace #%d generation = %d, want %d", k, g, k+2)
		waitQuiet(ph)
	}
	finish()

	total, bad, quiet := 0, 0, 0
	for i, rs := range results {
		for _, r := range rs {
			total++
			if r.err != nil {
				bad++
				if bad <= 5 { // the first few
					assert.Failf(t, "no answer", "conn %d: GET %s = %v, want an answer", i, r.path, r.err)
				}
				continue
			}
			// The generations in force from the request's sending to
			// its answer.
			lo, hi := r.p0/2+1, (r.p1+1)/2+1
			if lo == hi {
				quiet++
			}
			ok := false
			var want []string
			for g := lo; g <= hi; g++ {
				want = append(want, answerOf(policyA(g), r.path))
				ok = ok || r.answer == answerOf(policyA(g), r.path)
			}
			if !ok {
				bad++
				if bad <= 5 { // the first few
					assert.Failf(t, "wrong answer", "conn %d: GET %s in generations %d..%d = %s, want one of %v", i, r.path, lo, hi, r.answer, want)
				}
			}
		}
	}
	assert.Zero(t, bad, "%d of %d requests answered wrongly", bad, total)
	during := total - quiet
	assert.NotZero(t, during, "none of %d requests was under way during a change: no change met traffic", total)
	n := b3.hits.Load()
	assert.EqualValues(t, 0, n, "b3 got %d requests: /a was routed by B's routes under A's rules", n)
	t.Logf("%d requests over %d changes (%d with no change under way, the longest change %v); b1 %d, b2 %d",
		total, changes, quiet, longest.Round(time.Millisecond), b1.hits.Load(), b2.hits.Load())

	// changes is even: policy A is in force again, through the kernel
	// and through the proxy alike.
	st0, err := s.Status()
	require.NoError(t, err)
	assert.EqualValues(t, changes+1, st0.Generation, "Generation = %d, want %d", st0.Generation, changes+1)
	c := e.client()
	for k := 0; k < 20; k++ {
		for _, path := range []string{"/a", "/b"} {
			code, body, err := getPath(c, path)
			assert.False(t, err != nil || answerText(code, body) != answerOf(true, path), "after the changes: GET %s = %d %q, %v, want %s", path, code, body, err, answerOf(true, path))
		}
	}
	closing := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: e.dial, DisableKeepAlives: true}}
	for k := 0; k < 5; k++ {
		for _, path := range []string{"/a", "/b"} {
			code, body, err := getPath(closing, path)
			assert.False(t, err != nil || answerText(code, body) != answerOf(true, path), "after the changes, Connection: close: GET %s = %d %q, %v, want %s", path, code, body, err, answerOf(true, path))
		}
	}
	st1, err := s.Status()
	require.NoError(t, err)
	fast := st1.Routes[0].Fast - st0.Routes[0].Fast
	slow := st1.Routes[0].Slow - st0.Routes[0].Slow
	sticky := st1.Reasons["sticky"] - st0.Reasons["sticky"]
	deny := st1.Reasons["deny"] - st0.Reasons["deny"]
	assert.False(t, fast < 10 || sticky < 5 || slow < 5 || deny < 15,
		"after the changes: route all fast %d, slow %d; kernel sticky %d, deny %d; want most of 20 /a fast, the 5 closing ones sticky and forwarded by the proxy, every /b denied by the kernel's rule",
		fast, slow, sticky, deny)
}

// TestReplaceRefused: an invalid policy changes nothing, in the proxy or in
// the kernel's maps, and the old one is still enforced (requests prove it,
// through the fast path).
func TestReplaceRefused(t *testing.T) {
	e, b, _, pb, s := replaceSetup(t)
	b1, b2, b3 := b[0], b[1], b[2]
	c := e.client()
	for k := 0; k < 5; k++ {
		getPath(c, "/a")
	}
	s.mu.Lock()
	fp := s.fp
	s.mu.Unlock()
	var kpBefore bpf.L7Policy
	require.NoError(t, fp.objs.Policies.Lookup(uint32(0), &kpBefore))
	st0, _ := s.Status()

	bad := pb
	bad.Routes = append([]policy.Route(nil), pb.Routes...)
	bad.Routes[1].Backends = []string{"198.18.0.300:80"}
	bad.RBAC = []policy.Rule{{Name: "x", Action: "drop"}}
	_, g, err := s.Replace(bad)
	require.ErrorIs(t, err, ErrInvalidPolicy, "Replace(invalid)")
	require.ErrorContains(t, err, `l7.route[1].backends[0]: "198.18.0.300:80" is not IP:port`, "Replace(invalid): want both problems named")
	require.ErrorContains(t, err, `l7.rbac[0].action: "drop"`, "Replace(invalid): want both problems named")
	assert.EqualValues(t, 1, g, "Replace(invalid) generation = %d, want 1", g)
	var kpAfter bpf.L7Policy
	require.NoError(t, fp.objs.Policies.Lookup(uint32(0), &kpAfter))
	assert.Equal(t, kpBefore, kpAfter, "the kernel's policy changed on a refused change: enabled %d set_header %d routes %d rules %d, want %d %d %d %d",
		kpAfter.Enabled, kpAfter.SetHeader, kpAfter.N_routes, kpAfter.N_rules, kpBefore.Enabled, kpBefore.SetHeader, kpBefore.N_routes, kpBefore.N_rules)
	sec := s.Section()
	assert.False(t, len(sec.Routes) != 1 || sec.RBAC[0].Name != "no-b", "Section() = %+v, want policy A", sec)
	// /a alone on the warmed connection (a denied request between two
	// would be passed up, and the next might find the proxy still owing
	// its answer: busy), each /b first on a connection of its own.
	hits1 := b1.hits.Load()
	for k := 0; k < 20; k++ {
		code, body, err := getPath(c, "/a")
		assert.False(t, err != nil || answerText(code, body) != "b1", "after a refused change: GET /a = %d %q, %v, want b1 (policy A)", code, body, err)
	}
	for k := 0; k < 5; k++ {
		c2 := e.client()
		code, body, err := getPath(c2, "/b")
		c2.Transport.(*http.Transport).CloseIdleConnections()
		assert.False(t, err != nil || code != http.StatusForbidden, "after a refused change: GET /b = %d %q, %v, want 403 (policy A)", code, body, err)
	}
	st1, _ := s.Status()
	n := b1.hits.Load() - hits1
	assert.False(t, n != 20 || b2.hits.Load() != 0 || b3.hits.Load() != 0, "backend hits b1 +%d, b2 %d, b3 %d, want 20, 0, 0", n, b2.hits.Load(), b3.hits.Load())
	fast := st1.Routes[0].Fast - st0.Routes[0].Fast
	assert.False(t, fast < 15, "fast requests after a refused change = %d of 20, want most (the kernel still holds policy A)", fast)
	deny := st1.Reasons["deny"] - st0.Reasons["deny"]
	assert.False(t, deny < 4, "kernel deny count +%d for 5 denied requests, want them judged by the kernel's policy A", deny)
	assert.False(t, st1.Generation != 1 || st1.Refused != 1, "Status() generation %d refused %d, want 1 and 1", st1.Generation, st1.Refused)
}

// TestReplaceBackends: a change that drops a route's backend and adds a
// route to a new one: the pooled socket to the dropped backend is closed
// (its connection count falls to 0), it gets no request after the change,
// the new backend gets every request of its route and then serves them
// through the fast path (its pool filled lazily), and the counts follow
// route names (the kept route keeps its counts).
func TestReplaceBackends(t *testing.T) {
	e := newNS(t)
	needFast(t)
	// The dropped backend's pooled socket closes closeAfter after the
	// change: shortened, the check below waits for it.
	saved := closeAfter
	closeAfter = time.Second
	t.Cleanup(func() { closeAfter = saved })
	b1, b2, b3 := e.trackedBackend(t, "b1"), e.trackedBackend(t, "b2"), e.trackedBackend(t, "b3")
	old := policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b1.addr}}}}
	// The new route comes first: the kernel counts by route index, so
	// route all's counts move from index 0 to 1.
	next := policy.Config{Routes: []policy.Route{{Name: "new", PathPrefix: "/new", Backends: []string{b3.addr}},
		{Name: "all", PathPrefix: "/", Backends: []string{b2.addr}}}}
	s, _ := e.server(t, old, false)
	c := e.client()
	for k := 0; k < 10; k++ {
		code, body, err := getPath(c, "/x")
		require.False(t, err != nil || answerText(code, body) != "b1", "GET /x = %d %q %v, want b1", code, body, err)
	}
	st0, _ := s.Status()
	require.False(t, st0.Routes[0].Fast < 5, "route all fast = %d of 10, want the pool to b1 in use", st0.Routes[0].Fast)
	// b1 holds the proxy's own connection (idle in its Transport) and
	// the pooled one.
	n0 := b1.conns.Load()
	require.False(t, n0 < 2, "b1 connections = %d, want the pooled one and the proxy's", n0)
	_, _, err := s.Replace(next)
	require.NoError(t, err)
	// The proxy's Transport keeps its idle connection to b1 (90 s): only
	// the pooled socket must go.
	pooledGone := func() bool { return b1.conns.Load() <= n0-1 }
	deadline := time.Now().Add(5 * time.Second)
	for !pooledGone() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.True(t, pooledGone(), "b1 connections = %d after the change, want the pooled socket closed", b1.conns.Load())
	hits1 := b1.hits.Load()
	for k := 0; k < 10; k++ {
		for _, tc := range []struct{ path, want string }{{"/x", "b2"}, {"/new/y", "b3"}} {
			code, body, err := getPath(c, tc.path)
			assert.False(t, err != nil || answerText(code, body) != tc.want, "GET %s = %d %q %v, want %s", tc.path, code, body, err, tc.want)
		}
	}
	st1, _ := s.Status()
	n := b1.hits.Load() - hits1
	assert.False(t, n != 0 || b2.hits.Load() != 10 || b3.hits.Load() != 10, "hits after the change: b1 +%d, b2 %d, b3 %d, want 0, 10, 10", n, b2.hits.Load(), b3.hits.Load())
	assert.EqualValues(t, 1, st1.Dropped, "Status().Dropped = %d, want the one pooled socket to b1", st1.Dropped)
	require.False(t, len(st1.Routes) != 2 || st1.Routes[0].Name != "new" || st1.Routes[1].Name != "all", "routes = %+v, want new and all", st1.Routes)
	newR, all := st1.Routes[0], st1.Routes[1]
	fastAll := all.Fast - st0.Routes[0].Fast
	assert.False(t, fastAll < 5 || newR.Fast < 5, "fast after the change: all +%d, new %d of 10 each, want most (pools filled lazily)", fastAll, newR.Fast)
	got, want := all.Fast+all.Slow, uint64(20)
	assert.EqualValues(t, want, got, "route all fast+slow = %d, want %d (its counts kept across the change)", got, want)
	got = newR.Fast + newR.Slow
	assert.EqualValues(t, 10, got, "route new fast+slow = %d, want 10", got)
}

// TestReplaceSlowAnswer: a request the kernel sent to a backend before a
// change that drops it keeps its answer, however long the backend takes
// (up to closeAfter): the pooled socket leaves the pool but the backend
// sees nothing of the change. A half-close of the socket is no such
// thing: Go's net/http cancels the request's context at the client's EOF
// and nginx aborts a proxied request (499).
func TestReplaceSlowAnswer(t *testing.T) {
	e := newNS(t)
	needFast(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var canceled atomic.Int64
	l := e.listen(t)
	slow := l.Addr().String()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				canceled.Add(1)
			}
		}
		fmt.Fprintf(w, "slow %s", r.URL.Path)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	b2 := e.trackedBackend(t, "b2")
	old := policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{slow}}}}
	next := policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b2.addr}}}}
	s, _ := e.server(t, old, false)
	c := e.client()
	for k := 0; k < 5; k++ {
		code, body, err := getPath(c, "/x")
		require.False(t, err != nil || code != http.StatusOK, "GET /x = %d %q %v", code, body, err)
	}
	st0, _ := s.Status()
	type answer struct {
		code int
		body string
		err  error
	}
	ch := make(chan answer, 1)
	go func() { code, body, err := getPath(c, "/slow"); ch <- answer{code, body, err} }()
	select {
	case <-started:
	case a := <-ch:
		require.Failf(t, "answered early", "GET /slow = %d %q %v before the backend had it", a.code, a.body, a.err)
	}
	st, _ := s.Status()
	require.False(t, st.Routes[0].Fast == st0.Routes[0].Fast, "route all fast = %d before and after /slow, want /slow sent by the kernel", st.Routes[0].Fast)
	_, _, err := s.Replace(next)
	require.NoError(t, err)
	// The backend takes its time (well within closeAfter): the change
	// must not tell it its client left.
	time.Sleep(2 * time.Second)
	close(release)
	a := <-ch
	assert.False(t, a.err != nil || a.code != http.StatusOK || a.body != "slow /slow" || canceled.Load() != 0,
		"GET /slow across the change = %d %q %v, backend saw it canceled %d times; want its answer, never canceled",
		a.code, a.body, a.err, canceled.Load())
	code, body, err := getPath(c, "/x")
	assert.False(t, err != nil || answerText(code, body) != "b2", "GET /x after the change = %d %q %v, want b2", code, body, err)
}

// TestReplaceDuringStart: changes racing Start (serve's API may take one
// as the proxy starts) are ordered with it: each applies, the last one is
// in force, and under -race nothing Start reads (the log, the fast path's
// state) is written unordered.
func TestReplaceDuringStart(t *testing.T) {
	e := newNS(t)
	needFast(t)
	b1, b2 := e.trackedBackend(t, "b1"), e.trackedBackend(t, "b2")
	a := policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b1.addr}}}}
	b := policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b2.addr}}}}
	opt := fastOptions(t)
	var s *Server
	require.NoError(t, e.ns.Do(func() (err error) {
		s, err = Listen(policy.Section{Listen: "127.0.0.1:8080", Config: a}, e.dial, WithFastPath(opt))
		return err
	}), "Listen")
	t.Cleanup(func() { s.Close() })
	const changes = 20
	errs := make(chan error, changes)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range changes {
			cfg := a
			if i%2 == 0 {
				cfg = b
			}
			_, _, err := s.Replace(cfg)
			errs <- err
		}
	}()
	s.Start(slog.New(slog.NewTextHandler(io.Discard, nil)))
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "Replace during Start")
	}
	st, err := s.Status()
	require.False(t, err != nil || st.Generation != changes+1 || !st.Fast || !st.KernelPolicy, "Status() = %+v, %v, want generation %d, the fast path holding the policy", st, err, changes+1)
	// The last change (a) is in force, in the proxy and in the kernel.
	c := e.client()
	for k := 0; k < 5; k++ {
		code, body, err := getPath(c, "/x")
		assert.False(t, err != nil || answerText(code, body) != "b1", "GET /x = %d %q %v, want b1", code, body, err)
	}
}

// TestReplaceHoldFails: when a change cannot wait for the running programs
// (the grace map is gone), the change fails, the kernel is left passing
// every request to the proxy, which keeps the policy in force, and Status
// says the kernel no longer holds the policy, and why.
func TestReplaceHoldFails(t *testing.T) {
	e, _, _, pb, s := replaceSetup(t)
	s.mu.Lock()
	fp := s.fp
	s.mu.Unlock()
	fp.grace.Close()
	_, g, err := s.Replace(pb)
	require.False(t, err == nil || errors.Is(err, ErrInvalidPolicy) || g != 1, "Replace with no grace map = generation %d, %v, want generation 1 and an error of the change", g, err)
	st0, err := s.Status()
	require.False(t, err != nil || !st0.Fast || st0.KernelPolicy || !strings.Contains(st0.KernelPolicyWhy, "could not wait"), "Status() = fast %v, kernel policy %v (%q), %v, want the fast path loaded, not holding the policy, and why", st0.Fast, st0.KernelPolicy, st0.KernelPolicyWhy, err)
	c := e.client()
	for k := 0; k < 5; k++ {
		for _, path := range []string{"/a", "/b"} {
			code, body, err := getPath(c, path)
			got, want := answerText(code, body), answerOf(true, path)
			assert.False(t, err != nil || got != want, "after the failed change: GET %s = %q, %v, want %q (policy A)", path, got, err, want)
		}
	}
	st1, _ := s.Status()
	fast := st1.Routes[0].Fast - st0.Routes[0].Fast
	assert.EqualValues(t, 0, fast, "fast requests after the failed change = %d, want 0 (the kernel passes every request to the proxy)", fast)
}
