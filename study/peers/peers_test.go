package peers

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/l7"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// policy is the differential suite's (l7/diff_test.go newDiffEnv), with a
// route of its own per pool so a response names the route, and a header
// set: every field the generators write.
func testPolicy(b1, b2, b3 string) policy.Config {
	return policy.Config{
		Routes: []policy.Route{
			{Name: "api", Host: "api.test", PathPrefix: "/v1/", Backends: []string{b3}},
			{Name: "all", PathPrefix: "/", Backends: []string{b1, b2}},
		},
		RBAC: []policy.Rule{
			{Action: "deny", PathPrefix: "/admin"},
			{Action: "deny", Methods: []string{"DELETE"}, Header: "X-User", Value: "mallory"},
		},
		HashHeader: "X-User",
		SetHeader:  policy.Header{Name: "X-Shield", Value: "peer test"},
	}
}

func need(t *testing.T, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		testutil.SkipOrFail(t, fmt.Sprintf("%s not installed (ci/deps.sh installs it)", bin))
	}
	return p
}

// TestConfigsValid checks each generated configuration with the peer's own
// checker: haproxy -c and nginx -t.
func TestConfigsValid(t *testing.T) {
	cfg := testPolicy("198.18.0.1:8001", "198.18.0.2:8001", "[2001:db8::3]:8001")
	cfg.RBAC = append(cfg.RBAC, policy.Rule{Name: "office", Action: "allow", Source: "198.18.0.0/24", Methods: []string{"GET", "HEAD"}, PathPrefix: "/a.b(c)"})
	dir := t.TempDir()
	t.Run("haproxy", func(t *testing.T) {
		bin := need(t, "haproxy")
		text, err := HAProxy(cfg, "127.0.0.1:8080")
		require.NoError(t, err)
		f := filepath.Join(dir, "haproxy.cfg")
		require.NoError(t, os.WriteFile(f, []byte(text), 0o644))
		out, err := exec.Command(bin, "-c", "-f", f).CombinedOutput()
		require.NoError(t, err, "haproxy -c:\n%s\n%s", out, text)
	})
	t.Run("nginx", func(t *testing.T) {
		bin := need(t, "nginx")
		text, err := Nginx(cfg, "127.0.0.1:8080", dir)
		require.NoError(t, err)
		f := filepath.Join(dir, "nginx.conf")
		require.NoError(t, os.WriteFile(f, []byte(text), 0o644))
		out, err := exec.Command(bin, "-t", "-q", "-c", f, "-p", dir, "-e", filepath.Join(dir, "error.log")).CombinedOutput()
		require.NoError(t, err, "nginx -t:\n%s\n%s", out, text)
	})
	t.Run("refused", func(t *testing.T) {
		c := cfg
		c.Routes = append([]policy.Route{{Name: "port", Host: "a.test:8080", PathPrefix: "/", Backends: []string{"198.18.0.1:1"}}}, c.Routes...)
		_, err := Nginx(c, "127.0.0.1:8080", dir)
		require.ErrorContains(t, err, "l7.route[0].host")
	})
}

// corpusCase is a request case of l7/testdata/corpus (the differential
// suite's, each citing its public source there).
type corpusCase struct{ src, req string }

func loadCorpus(t *testing.T, file string) []corpusCase {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var out []corpusCase
	var src string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "src "):
			src = line[4:]
		case strings.HasPrefix(line, "req "):
			req, err := strconv.Unquote(line[4:])
			require.NoError(t, err, "%s: %s", file, src)
			out = append(out, corpusCase{src, req})
		}
	}
	require.NotEmpty(t, out, file)
	return out
}

// underAdmin is the differential suite's "under /admin" variant: an
// origin-form target moved under the denied /admin.
func underAdmin(req string) (string, bool) {
	line, rest, ok := strings.Cut(req, "\r\n")
	if !ok {
		return "", false
	}
	m, target, ok := strings.Cut(line, " /")
	if !ok {
		return "", false
	}
	return m + " /admin/" + target + "\r\n" + rest, true
}

// onAPI moves an origin-form request with the test's Host (a.test) to
// the api route's Host and under its prefix /v1/.
func onAPI(req string) (string, bool) {
	line, rest, ok := strings.Cut(req, "\r\n")
	m, target, ok2 := strings.Cut(line, " /")
	if !ok || !ok2 || !strings.Contains(rest, "Host: a.test\r\n") {
		return "", false
	}
	return m + " /v1/" + target + "\r\n" + strings.Replace(rest, "Host: a.test\r\n", "Host: api.test\r\n", 1), true
}

// asMallory makes a GET a DELETE sent by mallory (the second rule).
func asMallory(req string) (string, bool) {
	rest, ok := strings.CutPrefix(req, "GET /")
	if !ok {
		return "", false
	}
	line, head, ok := strings.Cut(rest, "\r\n")
	if !ok {
		return "", false
	}
	return "DELETE /" + line + "\r\nX-User: mallory\r\n" + head, true
}

// env is a namespace with three echoing backends.
type env struct {
	ns *topo.NS
	be [3]string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testutil.Root(t)
	ns, err := topo.New("peers")
	require.NoError(t, err)
	t.Cleanup(func() { ns.Close() })
	e := &env{ns: ns}
	for i := range e.be {
		l := e.listen(t, "127.0.0.1:0")
		e.be[i] = l.Addr().String()
		name := fmt.Sprintf("b%d", i+1)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			// The answer says who received what: the route, and
			// whether a denied request came through.
			fmt.Fprintf(w, "%s %s %s user=%s set=%s", name, r.Method, r.RequestURI, r.Header.Get("X-User"), r.Header.Get("X-Shield"))
		})}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}
	return e
}

func (e *env) listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	require.NoError(t, e.ns.Do(func() (err error) { l, err = net.Listen("tcp", addr); return err }))
	t.Cleanup(func() { l.Close() })
	return l
}

func (e *env) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := e.ns.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// start runs a peer in the namespace and waits until addr accepts.
func (e *env) start(t *testing.T, addr string, name string, args ...string) {
	t.Helper()
	cmd := e.ns.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := e.dial(t.Context(), "tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		require.False(t, time.Now().After(deadline), "%s does not listen on %s: %v\n%s", name, addr, err, out.String())
		time.Sleep(20 * time.Millisecond)
	}
}

// answers sends req on a new connection and returns each response as
// "STATUS" or, when a backend answered, "STATUS body" ("none" when no
// response came).
func (e *env) answers(t *testing.T, addr, req string) []string {
	c, err := e.dial(t.Context(), "tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	var out []string
	for wait := time.Second; ; wait = 300 * time.Millisecond {
		c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a := strconv.Itoa(resp.StatusCode)
		if resp.StatusCode == 200 {
			a += " " + string(body)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		out = []string{"none"}
	}
	return out
}

// class is what an answer says of the policy: denied (403), no route
// (404), refused (another 4xx/5xx, none), or routed to a route.
func class(a string) string {
	status, body, _ := strings.Cut(a, " ")
	switch {
	case status == "403":
		return "denied"
	case status == "404":
		return "no route"
	case status == "200":
		if strings.HasPrefix(body, "b3 ") {
			return "routed api"
		}
		return "routed all"
	}
	return "refused"
}

// leaked reports whether a backend's answer shows it received a request
// the policy denies: a path under /admin in the project's normal form, or
// DELETE from mallory.
func leaked(a string) bool {
	f := strings.Fields(a)
	if len(f) < 4 || f[0] != "200" {
		return false
	}
	method, uri := f[2], f[3]
	if i := strings.Index(uri, "://"); i >= 0 {
		uri = uri[i+3:]
		uri = uri[strings.IndexByte(uri, '/'):]
	}
	p, _, _ := strings.Cut(uri, "?")
	return strings.HasPrefix(normal(p), "/admin") || method == "DELETE" && strings.Contains(a, "user=mallory")
}

// normal is a rough normal form for leaked: escapes of letters decoded,
// dot segments and repeated slashes gone.
func normal(p string) string {
	for i := 0; i+2 < len(p); i++ {
		if p[i] == '%' {
			if v, err := strconv.ParseUint(p[i+1:i+3], 16, 8); err == nil && (v >= 'a' && v <= 'z' || v >= 'A' && v <= 'Z' || v == '.') {
				p = p[:i] + string(rune(v)) + p[i+3:]
			}
		}
	}
	var segs []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..", "..;":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	return "/" + strings.Join(segs, "/")
}

// plain reports whether a request's target is a path every reader reads
// alike (no escape, dot segment or repeated slash): the cases where the
// peers must judge and route as the project does.
func plain(req string) bool {
	line, _, _ := strings.Cut(req, "\r\n")
	f := strings.Fields(line)
	if len(f) != 3 || !strings.HasPrefix(f[1], "/") {
		return false
	}
	return !strings.ContainsAny(f[1], "%\\;") && !strings.Contains(f[1], "//") && !strings.Contains(f[1], "/.")
}

// TestPeersAnswerAlike runs the Go proxy, HAProxy and nginx in one
// namespace with configurations generated from one policy, sends each the
// differential suite's research cases (as written, under /admin, on the
// api route, as mallory's DELETE), and
// compares their answers: on plain paths every peer must deny and route as
// the Go proxy does (the fast path answers as the Go proxy: TestL7Corpus);
// elsewhere, each disagreement is logged as a finding, and a denied
// request a peer let through is named.
func TestPeersAnswerAlike(t *testing.T) {
	haproxy, nginx := need(t, "haproxy"), need(t, "nginx")
	e := newEnv(t)
	cfg := testPolicy(e.be[0], e.be[1], e.be[2])
	addrs := map[string]string{}

	pol, err := policy.Compile(cfg)
	require.NoError(t, err)
	px := l7.NewProxy(pol, e.dial)
	l := e.listen(t, "127.0.0.1:0")
	srv := px.Server()
	go px.Serve(srv, l)
	t.Cleanup(func() { srv.Close() })
	addrs["go"] = l.Addr().String()

	dir := t.TempDir()
	addrs["haproxy"] = "127.0.0.1:18081"
	text, err := HAProxy(cfg, addrs["haproxy"])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(text), 0o644))
	e.start(t, addrs["haproxy"], haproxy, "-db", "-f", filepath.Join(dir, "haproxy.cfg"))

	addrs["nginx"] = "127.0.0.1:18082"
	text, err = Nginx(cfg, addrs["nginx"], dir)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(text), 0o644))
	e.start(t, addrs["nginx"], nginx, "-c", filepath.Join(dir, "nginx.conf"), "-p", dir, "-e", filepath.Join(dir, "error.log"))

	type job struct{ name, req string }
	var jobs []job
	for _, c := range loadCorpus(t, "../../l7/testdata/corpus/research.txt") {
		jobs = append(jobs, job{c.src + " (as written)", c.req})
		for v, f := range map[string]func(string) (string, bool){"under /admin": underAdmin, "on api.test under /v1/": onAPI, "DELETE by mallory": asMallory} {
			if r, ok := f(c.req); ok {
				jobs = append(jobs, job{c.src + " (" + v + ")", r})
			}
		}
	}
	peers := []string{"go", "haproxy", "nginx"}
	got := make([]map[string][]string, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 12)
	var mu sync.Mutex
	for i, j := range jobs {
		got[i] = map[string][]string{}
		for _, p := range peers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				a := e.answers(t, addrs[p], j.req)
				mu.Lock()
				got[i][p] = a
				mu.Unlock()
			}()
		}
	}
	wg.Wait()

	compared, plainN := 0, 0
	findings := map[string][]string{}
	for i, j := range jobs {
		want := got[i]["go"]
		for _, p := range peers[1:] {
			a := got[i][p]
			for _, x := range a {
				if leaked(x) {
					findings[p] = append(findings[p], fmt.Sprintf("LET THROUGH a denied request: %s: %q -> %q", j.name, j.req, x))
				}
			}
			wc, ac := classes(want), classes(a)
			compared++
			// A peer whose parser refuses what the Go proxy takes (or
			// the reverse) is a finding; a peer that takes a plain
			// request must judge and route it as the project does.
			if plain(j.req) && ac[0] != "refused" && (wc[0] == "denied" || strings.HasPrefix(wc[0], "routed")) {
				plainN++
				assert.Equal(t, wc[0], ac[0], "%s: %s answers %q, the Go proxy %q\n%q", j.name, p, a, want, j.req)
				if wc[0] == ac[0] {
					continue
				}
			}
			if fmt.Sprint(wc) != fmt.Sprint(ac) {
				findings[p] = append(findings[p], fmt.Sprintf("differs: %s: %v, the Go proxy %v", j.name, ac, wc))
			}
		}
	}
	for _, p := range peers[1:] {
		sort.Strings(findings[p])
		t.Logf("%s: %d findings:\n  %s", p, len(findings[p]), strings.Join(findings[p], "\n  "))
	}
	t.Logf("%d requests, %d comparisons, %d of plain denied or routed requests", len(jobs), compared, plainN)
	require.NotZero(t, plainN, "no plain denied or routed case ran")
}

func classes(as []string) []string {
	var out []string
	for _, a := range as {
		out = append(out, class(a))
	}
	return out
}
