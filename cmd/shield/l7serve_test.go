package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/l7"
)

// l7Backend is an HTTP server in the edge namespace that records every
// request it gets (path and X-User).
type l7Backend struct {
	mu   sync.Mutex
	seen []string // "PATH user"
	edge []string // X-Edge of each request
}

func (b *l7Backend) requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.seen...)
}

func (l *lab) l7Backend(t *testing.T, addr string) *l7Backend {
	t.Helper()
	var ln net.Listener
	require.NoError(t, l.edge.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}))
	b := &l7Backend{}
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, r.URL.Path+" "+r.Header.Get("X-User"))
		b.edge = append(b.edge, r.Header.Get("X-Edge"))
		b.mu.Unlock()
		fmt.Fprintf(w, "%s %s", addr, r.URL.Path)
	})}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return b
}

// l7Client is one kept-alive HTTP connection from src in the storm
// namespace.
func (l *lab) l7Client(t *testing.T, src string) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := l.storm.Do(func() (err error) {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestServeL7 runs `shield serve` with an [l7] section on the edge's port
// 80, behind the shield: requests from the storm namespace are routed by
// path to two backends, RBAC-denied ones (by path, by source) are answered
// 403 and never reach a backend (the backends' own records say so), and GET
// /v1/l7, `shield l7` and /metrics count them, fast and slow path apart. On
// a kernel new enough the fast path must be on and carry most requests of
// a kept-alive connection; on an older one serve must still start, with
// the Go proxy alone, and say why.
func TestServeL7(t *testing.T) {
	l := newLab(t, "l7sv")
	api, web := l.l7Backend(t, "198.18.0.1:9001"), l.l7Backend(t, "198.18.0.1:9002")
	conf := filepath.Join(t.TempDir(), "shield.toml")
	require.NoError(t, os.WriteFile(conf, []byte(`[l7]
listen = "198.18.0.1:80"
hash_header = "X-User"
[[l7.route]]
name = "api"
path_prefix = "/api"
backends = ["198.18.0.1:9001"]
[[l7.route]]
name = "web"
path_prefix = "/"
backends = ["198.18.0.1:9002"]
[[l7.rbac]]
name = "no-admin"
action = "deny"
path_prefix = "/api/admin"
[[l7.rbac]]
name = "not-from-3"
action = "deny"
source = "198.18.0.3/32"
`), 0o600))
	s := l.serve(t, "-config", conf)
	s.waitLog(t, `msg="l7 proxy serving`)
	fast, _ := l7.KernelServes()

	get := func(c *http.Client, path, user string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://198.18.0.1"+path, nil)
		req.Header.Set("X-User", user)
		resp, err := c.Do(req)
		require.NoError(t, err, "GET %s as %s: %v\nserve:\n%s", path, user, err, s.out)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	const nAPI, nWeb, nAdmin, nFrom3 = 30, 10, 5, 4
	alice := l.l7Client(t, "198.18.0.2")
	for i := range nAPI {
		code, body := get(alice, fmt.Sprintf("/api/items/%d", i), "alice")
		require.Equal(t, 200, code, "GET /api/items/%d = %d %q, want 200 from the api backend", i, code, body)
		require.Equal(t, fmt.Sprintf("198.18.0.1:9001 /api/items/%d", i), body, "GET /api/items/%d = %d %q, want 200 from the api backend", i, code, body)
	}
	for i := range nWeb {
		code, body := get(alice, fmt.Sprintf("/index/%d", i), "alice")
		require.Equal(t, 200, code, "GET /index/%d = %d %q, want 200 from the web backend", i, code, body)
		require.Equal(t, fmt.Sprintf("198.18.0.1:9002 /index/%d", i), body, "GET /index/%d = %d %q, want 200 from the web backend", i, code, body)
	}
	for i := range nAdmin {
		code, _ := get(alice, fmt.Sprintf("/api/admin/%d", i), "alice")
		assert.Equal(t, 403, code, "GET /api/admin/%d = %d, want 403", i, code)
	}
	mallory := l.l7Client(t, "198.18.0.3")
	for i := range nFrom3 {
		code, _ := get(mallory, fmt.Sprintf("/api/items/%d", i), "mallory")
		assert.Equal(t, 403, code, "GET /api/items/%d from 198.18.0.3 = %d, want 403", i, code)
	}

	// The backends saw exactly the allowed requests: nothing of admin,
	// nothing from mallory.
	for _, b := range []struct {
		name string
		b    *l7Backend
		want int
	}{{"api", api, nAPI}, {"web", web, nWeb}} {
		got := b.b.requests()
		assert.Len(t, got, b.want, "%s backend got %d requests, want %d", b.name, len(got), b.want)
		for _, r := range got {
			assert.False(t, strings.HasPrefix(r, "/api/admin") || strings.HasSuffix(r, " mallory"), "%s backend got a denied request: %q", b.name, r)
		}
	}

	ctx := context.Background()
	st, err := l.client.L7(ctx)
	require.NoError(t, err)
	t.Logf("GET /v1/l7 = %+v", st)
	require.Equal(t, "198.18.0.1:80", st.Listen, "GET /v1/l7 = %+v, want the configured proxy", st)
	require.Len(t, st.Routes, 2, "GET /v1/l7 = %+v, want the configured proxy", st)
	require.Len(t, st.RBAC, 2, "GET /v1/l7 = %+v, want the configured proxy", st)
	for i, want := range []uint64{nAPI, nWeb} {
		r := st.Routes[i]
		assert.Equal(t, want, r.Fast+r.Slow, "route %s: fast %d + slow %d, want %d requests", r.Name, r.Fast, r.Slow, want)
	}
	for i, want := range []uint64{nAdmin, nFrom3} {
		r := st.RBAC[i]
		assert.Equal(t, want, r.Denied, "rule %s denied %d, want %d", r.Name, r.Denied, want)
	}
	if fast {
		assert.True(t, st.FastPath.Attached && st.FastPath.KernelPolicy, "fast path = %+v on a kernel it runs on, want attached with the policy", st.FastPath)
		// One connection: its first request of each route is a miss (the
		// proxy fills the pool), most of the rest go fast.
		r := st.Routes[0]
		assert.GreaterOrEqual(t, r.Fast, uint64(nAPI/2), "route api: %d of %d requests fast, want most (kernel: %v)", r.Fast, nAPI, st.FastPath.Messages)
		// The kernel judged every request once: redirected, or passed to
		// the proxy with its reason (a denied one as deny, or as busy
		// while the proxy still owed an answer on the connection).
		var judged uint64
		for reason, n := range st.FastPath.Messages {
			if reason != "response" && reason != "sticky_more" && reason != "unknown" {
				judged += n
			}
		}
		want := uint64(nAPI + nWeb + nAdmin + nFrom3)
		assert.Equal(t, want, judged, "kernel judged %d requests (%v), want the %d sent, some denied", judged, st.FastPath.Messages, want)
		assert.NotZero(t, st.FastPath.Messages["deny"], "kernel judged %d requests (%v), want the %d sent, some denied", judged, st.FastPath.Messages, want)
	} else {
		const msg = "fast path = %+v, routes %+v on a kernel the fast path does not serve (not among %v): want the proxy alone, saying why"
		assert.False(t, st.FastPath.Attached, msg, st.FastPath, st.Routes, l7.Kernels)
		assert.NotEmpty(t, st.FastPath.Why, msg, st.FastPath, st.Routes, l7.Kernels)
		assert.EqualValues(t, nAPI, st.Routes[0].Slow, msg, st.FastPath, st.Routes, l7.Kernels)
		s.waitLog(t, "l7 proxy serving without the fast path")
	}

	// The CLI prints the same.
	cmd, out := l.shieldCmd("l7")
	require.NoError(t, cmd.Run(), "shield l7:\n%s", out)
	t.Logf("shield l7:\n%s", out)
	assert.True(t, regexp.MustCompile(fmt.Sprintf(`(?m)^no-admin\s+deny\s+path /api/admin\*\s+%d$`, nAdmin)).MatchString(out.String()), "shield l7 lacks the no-admin rule with %d denied:\n%s", nAdmin, out)

	resp, err := l.client.HTTP.Get(l.client.Base + "/metrics")
	require.NoError(t, err)
	var text bytes.Buffer
	text.ReadFrom(resp.Body)
	resp.Body.Close()
	metric := func(name string) uint64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindStringSubmatch(text.String())
		require.NotNil(t, m, "/metrics lacks %s", name)
		v, _ := strconv.ParseUint(m[1], 10, 64)
		return v
	}
	for _, r := range []struct {
		route string
		want  uint64
		fast  uint64
	}{{"api", nAPI, st.Routes[0].Fast}, {"web", nWeb, st.Routes[1].Fast}} {
		f := metric(fmt.Sprintf(`shield_l7_requests_total{path="fast",route="%s"}`, r.route))
		sl := metric(fmt.Sprintf(`shield_l7_requests_total{path="slow",route="%s"}`, r.route))
		assert.Equal(t, r.want, f+sl, "/metrics route %s: fast %d slow %d, want %d in all, %d fast (as GET /v1/l7)", r.route, f, sl, r.want, r.fast)
		assert.Equal(t, r.fast, f, "/metrics route %s: fast %d slow %d, want %d in all, %d fast (as GET /v1/l7)", r.route, f, sl, r.want, r.fast)
	}
	assert.EqualValues(t, nAdmin, metric(`shield_l7_denied_total{rule="no-admin"}`), `shield_l7_denied_total{rule="no-admin"}`)
	assert.EqualValues(t, nFrom3, metric(`shield_l7_denied_total{rule="not-from-3"}`), `shield_l7_denied_total{rule="not-from-3"}`)
	assert.Equal(t, map[bool]uint64{true: 1, false: 0}[fast], metric("shield_l7_fast_path"), "shield_l7_fast_path")
	assert.Equal(t, st.Routes[0].Slow, metric(`shield_l7_responses_total{code="2xx",route="api"}`), `shield_l7_responses_total{code="2xx",route="api"}: want the slow requests`)
}

// TestServeL7SetHeader: with [l7.set_header] every request reaches its
// backend with the header set, the client's own value replaced; the kernel
// does not rewrite headers, so the fast path passes every request to the
// proxy (policy) and the API says why nothing goes fast.
func TestServeL7SetHeader(t *testing.T) {
	l := newLab(t, "l7sh")
	b := l.l7Backend(t, "198.18.0.1:9001")
	conf := filepath.Join(t.TempDir(), "shield.toml")
	require.NoError(t, os.WriteFile(conf, []byte(`[l7]
listen = "198.18.0.1:80"
[[l7.route]]
name = "all"
path_prefix = "/"
backends = ["198.18.0.1:9001"]
[l7.set_header]
name = "X-Edge"
value = "shield"
`), 0o600))
	s := l.serve(t, "-config", conf)
	s.waitLog(t, `msg="l7 proxy serving`)
	c := l.l7Client(t, "198.18.0.2")
	const n = 5
	for i := range n {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://198.18.0.1/x/%d", i), nil)
		req.Header.Set("X-Edge", "client")
		resp, err := c.Do(req)
		require.NoError(t, err, "GET /x/%d", i)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.EqualValues(t, 200, resp.StatusCode, "GET /x/%d = %d, want 200", i, resp.StatusCode)
	}
	b.mu.Lock()
	edge := append([]string(nil), b.edge...)
	b.mu.Unlock()
	require.Len(t, edge, n, "backend got %d requests, want %d", len(edge), n)
	for i, v := range edge {
		assert.EqualValues(t, "shield", v, "request %d reached the backend with X-Edge %q, want %q", i, v, "shield")
	}
	st, err := l.client.L7(context.Background())
	require.NoError(t, err)
	const slow = "GET /v1/l7 = %+v, want set_header X-Edge: shield and all %d requests slow"
	assert.Equal(t, "X-Edge: shield", st.SetHeader, slow, st, n)
	assert.Zero(t, st.Routes[0].Fast, slow, st, n)
	assert.EqualValues(t, n, st.Routes[0].Slow, slow, st, n)
	if fast, _ := l7.KernelServes(); fast {
		// Passed up as policy, or as busy while the proxy still owed the
		// connection an answer; none fast.
		m := st.FastPath.Messages
		const msg = "fast path = %+v, want attached and all %d requests passed up as policy (or busy)"
		assert.True(t, st.FastPath.Attached, msg, st.FastPath, n)
		assert.EqualValues(t, n, m["policy"]+m["busy"], msg, st.FastPath, n)
		assert.NotZero(t, m["policy"], msg, st.FastPath, n)
		assert.Zero(t, m["fast"], msg, st.FastPath, n)
	}
}
