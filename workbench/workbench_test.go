package workbench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/source"
)

const token = "operator-token-0123456789"

// fakeSource is a shield whose counters the test moves.
type fakeSource struct {
	mu sync.Mutex
	c  counter.Counters
}

func (f *fakeSource) add(v counter.Verdict, r counter.Reason, n uint64) {
	f.mu.Lock()
	f.c[v][r][0] += n
	f.mu.Unlock()
}
func (f *fakeSource) Counters() (counter.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.c, nil
}
func (f *fakeSource) CountSources(context.Context) (int, error) { return 3, nil }
func (f *fakeSource) TableSize() uint32                         { return 1024 }
func (f *fakeSource) List(l lists.List) ([]netip.Prefix, error) {
	if l == lists.DenyList {
		return []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}, nil
	}
	return nil, nil
}
func (f *fakeSource) Limits() config.Limits { return config.DefaultLimits() }
func (f *fakeSource) Top(context.Context, int, source.TopOrder) ([]source.Source, shield.WalkStats, error) {
	return []source.Source{{Addr: netip.MustParseAddr("198.18.0.9"), Prefix: netip.MustParsePrefix("198.18.0.9/32"), Dropped: 7}}, shield.WalkStats{}, nil
}

type tenv struct {
	src *fakeSource
	wb  *Workbench
	srv *httptest.Server
}

func newTest(t *testing.T, cfg Config, tls bool) *tenv {
	t.Helper()
	src := &fakeSource{}
	if cfg.Token == "" {
		cfg.Token = token
	}
	if cfg.Interval == 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.Storm.LockPath == "" {
		// Not the machine's: another process's storm or study holds it.
		cfg.Storm.LockPath = filepath.Join(t.TempDir(), "storm.lock")
	}
	wb := New(src, cfg)
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(wb)
	} else {
		srv = httptest.NewServer(wb)
	}
	t.Cleanup(srv.Close)
	return &tenv{src: src, wb: wb, srv: srv}
}

// client is a browser: it keeps cookies.
func (e *tenv) client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := e.srv.Client()
	c.Jar = jar
	return c
}

func do(t *testing.T, c *http.Client, method, url, csrf, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if csrf != "" {
		req.Header.Set(CSRFHeader, csrf)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func signIn(t *testing.T, e *tenv, c *http.Client, secret string) SessionInfo {
	t.Helper()
	resp, body := do(t, c, "POST", e.srv.URL+Prefix+"signin", "", `{"token":"`+secret+`"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var info SessionInfo
	require.NoError(t, json.Unmarshal([]byte(body), &info))
	require.True(t, info.SignedIn)
	require.NotEmpty(t, info.CSRF)
	return info
}

// TestPageSelfContained: the page and its files are served with a policy
// that loads nothing from elsewhere, and the page names no other origin.
func TestPageSelfContained(t *testing.T) {
	e := newTest(t, Config{}, false)
	for _, p := range []string{"", "static/app.js", "static/app.css"} {
		resp, body := do(t, e.srv.Client(), "GET", e.srv.URL+Prefix+p, "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'", p)
		assert.NotContains(t, body, "http://", p)
		assert.NotContains(t, body, "https://", p)
	}
}

// readEvents reads n samples from the live stream.
func readEvents(t *testing.T, c *http.Client, url string, n int, each func(int, Sample), stop ...func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	i := 0
	for sc.Scan() && i < n {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var s Sample
		require.NoError(t, json.Unmarshal([]byte(data), &s))
		each(i, s)
		i++
		if len(stop) > 0 && stop[0]() {
			return
		}
	}
	require.Equal(t, n, i, "samples read")
}

// TestEventsMove: the stream's rates follow the counters, and it carries
// the table, lists, limits and top talkers.
func TestEventsMove(t *testing.T) {
	e := newTest(t, Config{}, false)
	var drops []float64
	readEvents(t, e.srv.Client(), e.srv.URL+Prefix+"events", 4, func(i int, s Sample) {
		drops = append(drops, s.PPS["drop"])
		assert.Equal(t, 3, s.Tracked)
		assert.Equal(t, uint32(1024), s.Capacity)
		assert.Equal(t, 1, s.Lists["deny"])
		assert.Equal(t, config.DefaultLimits(), s.Limits)
		require.Len(t, s.Top, 1)
		if i >= 1 {
			assert.Greater(t, s.Seconds, 0.0)
		}
		e.src.add(counter.Drop, counter.Reason(1), 1000)
	})
	assert.Zero(t, drops[0], "the first sample has no rate")
	for _, d := range drops[1:] {
		assert.Greater(t, d, 1000.0, "1000 drops per ~0.1 s")
	}
}

// TestReadOnlyViewOff: with NoAnonymous the stream needs a session.
func TestReadOnlyViewOff(t *testing.T) {
	e := newTest(t, Config{NoAnonymous: true}, false)
	c := e.client(t)
	resp, _ := do(t, c, "GET", e.srv.URL+Prefix+"events", "", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	signIn(t, e, c, token)
	readEvents(t, c, e.srv.URL+Prefix+"events", 1, func(int, Sample) {})
}

// TestSignIn: a wrong token is refused; the right one or the workbench
// credential makes a session whose cookie is HttpOnly and SameSite=Strict
// (Secure over TLS); sign-out ends it.
func TestSignIn(t *testing.T) {
	const cred = "workbench-credential-42424242"
	for _, tls := range []bool{false, true} {
		e := newTest(t, Config{Credential: cred}, tls)
		c := e.client(t)
		resp, _ := do(t, c, "POST", e.srv.URL+Prefix+"signin", "", `{"token":"wrong-token-0123456789"}`)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"signin", "", `{"token":""}`)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		// A form (what another site can post without asking) is refused.
		req, _ := http.NewRequest("POST", e.srv.URL+Prefix+"signin", strings.NewReader("token="+token))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r2, err := c.Do(req)
		require.NoError(t, err)
		r2.Body.Close()
		require.Equal(t, http.StatusUnsupportedMediaType, r2.StatusCode)

		for _, secret := range []string{token, cred} {
			resp, body := do(t, c, "POST", e.srv.URL+Prefix+"signin", "", `{"token":"`+secret+`"}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			ck := resp.Cookies()
			require.Len(t, ck, 1)
			assert.True(t, ck[0].HttpOnly)
			assert.Equal(t, http.SameSiteStrictMode, ck[0].SameSite)
			assert.Equal(t, tls, ck[0].Secure, "Secure over TLS")
			assert.Equal(t, Prefix, ck[0].Path)
			var info SessionInfo
			require.NoError(t, json.Unmarshal([]byte(body), &info))
			resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"signout", info.CSRF, "")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			_, body = do(t, c, "GET", e.srv.URL+Prefix+"session", "", "")
			assert.Contains(t, body, `"signed_in":false`)
		}
	}
}

// TestSignInThrottled: past a burst, failed sign-ins are answered 429.
func TestSignInThrottled(t *testing.T) {
	e := newTest(t, Config{}, false)
	codes := map[int]int{}
	for range failBurst + 3 {
		resp, _ := do(t, e.srv.Client(), "POST", e.srv.URL+Prefix+"signin", "", `{"token":"guess-0000000000000"}`)
		codes[resp.StatusCode]++
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: failBurst, http.StatusTooManyRequests: 3}, codes)
}

// TestCSRF: a change needs a session and its CSRF token.
func TestCSRF(t *testing.T) {
	e := newTest(t, Config{}, false)
	c := e.client(t)
	resp, _ := do(t, c, "POST", e.srv.URL+Prefix+"storm", "", `{"scenario":"few"}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no session")
	info := signIn(t, e, c, token)
	resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"storm", "", `{"scenario":"few"}`)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF+"x", `{"scenario":"few"}`)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "wrong CSRF token")
	resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"signout", "", "")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "sign-out without the token")
	resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"nope"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "with the token the request is read")
}

// TestSessionExpires: a session past its TTL is gone.
func TestSessionExpires(t *testing.T) {
	e := newTest(t, Config{SessionTTL: 200 * time.Millisecond}, false)
	c := e.client(t)
	info := signIn(t, e, c, token)
	time.Sleep(300 * time.Millisecond)
	_, body := do(t, c, "GET", e.srv.URL+Prefix+"session", "", "")
	assert.Contains(t, body, `"signed_in":false`)
	resp, _ := do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// fakeLab writes a shieldlab that prints two phases' progress and the
// final JSON (its -json argument), sleeping between lines.
func fakeLab(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "shieldlab")
	script := `#!/bin/sh
out=""
while [ $# -gt 0 ]; do [ "$1" = "-json" ] && out="$2"; shift; done
echo "$@" > /dev/null
for ph in baseline few-sources; do
  for d in 10 2000; do
    echo "{\"phase\":\"$ph\",\"shield\":true,\"drop_pps\":{\"rate_limited\":$d},\"p50_ms\":{\"keep_alive\":0.4},\"p99_ms\":{\"keep_alive\":1.5},\"requests\":5}"
    sleep 0.2
  done
done
echo "storm table on stderr" >&2
echo '{"ok":true,"failed":[],"phases":[{"name":"baseline"},{"name":"few-sources"}]}' > "$out"
`
	require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

func waitStorm(t *testing.T, wb *Workbench) *StormState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if st := wb.storm.snapshot(); st.Done {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Fail(t, "the storm did not end")
	return nil
}

// TestStorm: a signed-in session starts the lab's storm; its phases are
// followed, the final table is downloadable, one runs at a time, and a
// session starts at most PerHour an hour.
func TestStorm(t *testing.T) {
	e := newTest(t, Config{Storm: StormConfig{Binary: fakeLab(t), PerHour: 2}}, false)
	c := e.client(t)
	info := signIn(t, e, c, token)
	require.Empty(t, info.StormProblem)
	require.Equal(t, 2, info.StormsLeft)
	resp, _ := do(t, c, "GET", e.srv.URL+Prefix+"storm/result", "", "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, body := do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusConflict, resp.StatusCode, "one at a time")
	// The stream until the storm is over (at most 100 samples, 10 s).
	var maxDrop float64
	over := false
	readEvents(t, c, e.srv.URL+Prefix+"events", 100, func(_ int, s Sample) {
		require.NotNil(t, s.Storm)
		if s.Storm.Now != nil {
			maxDrop = max(maxDrop, s.Storm.Now.DropPPS["rate_limited"])
		}
		over = over || s.Storm.Done
	}, func() bool { return over })
	st := waitStorm(t, e.wb)
	assert.Equal(t, []string{"baseline", "few-sources"}, st.Phases)
	assert.True(t, st.OK)
	assert.Equal(t, 2000.0, maxDrop)
	resp, body = do(t, c, "GET", e.srv.URL+Prefix+"storm/result", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Disposition"), "storm.json")
	assert.Contains(t, body, `"few-sources"`)

	resp, body = do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"many","contrast":true}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	waitStorm(t, e.wb)
	resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "PerHour storms an hour")
}

// TestStormRefusals: without the lab binary, or while another process
// holds the storm lock, no storm starts.
func TestStormRefusals(t *testing.T) {
	e := newTest(t, Config{Storm: StormConfig{Binary: filepath.Join(t.TempDir(), "missing")}}, false)
	c := e.client(t)
	info := signIn(t, e, c, token)
	require.Contains(t, info.StormProblem, "not an executable")
	resp, body := do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)

	e = newTest(t, Config{Storm: StormConfig{Binary: fakeLab(t)}}, false)
	e.wb.storm.lockPath = filepath.Join(t.TempDir(), "lock")
	_, release, err := takeLock(e.wb.storm.lockPath)
	require.NoError(t, err)
	c = e.client(t)
	info = signIn(t, e, c, token)
	resp, body = do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	release()
	resp, body = do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	waitStorm(t, e.wb)
}

// TestEventsOutliveServerTimeouts: the service's http.Server has read
// and write timeouts (30 s and the top timeout + 10 s); a live stream
// must not end at them (the browser would reconnect every half minute).
func TestEventsOutliveServerTimeouts(t *testing.T) {
	wb := New(&fakeSource{}, Config{Token: token, Interval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Storm: StormConfig{LockPath: filepath.Join(t.TempDir(), "lock")}})
	srv := httptest.NewUnstartedServer(wb)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	start := time.Now()
	readEvents(t, srv.Client(), srv.URL+Prefix+"events", 15, func(int, Sample) {})
	require.Greater(t, time.Since(start), time.Second, "15 samples 100 ms apart on one stream")
}

// TestCloseStopsStorm: Close (the service stopping) ends a running storm
// with SIGINT to its group, waits for it, and refuses new ones.
func TestCloseStopsStorm(t *testing.T) {
	dir := t.TempDir()
	lab := filepath.Join(dir, "shieldlab")
	marker := filepath.Join(dir, "interrupted")
	require.NoError(t, os.WriteFile(lab, []byte("#!/bin/sh\ntrap 'echo > "+marker+"; exit 1' INT\necho '{\"phase\":\"baseline\"}'\nsleep 30 &\nwait\n"), 0o755))
	// sh's background sleep ignores SIGINT and holds stdout: the group
	// is killed after the grace.
	old := killGrace
	killGrace = time.Second
	t.Cleanup(func() { killGrace = old })
	e := newTest(t, Config{Storm: StormConfig{Binary: lab}}, false)
	c := e.client(t)
	info := signIn(t, e, c, token)
	resp, body := do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	require.Eventually(t, func() bool { return len(e.wb.storm.snapshot().Phases) == 1 }, 5*time.Second, 20*time.Millisecond)
	start := time.Now()
	e.wb.Close()
	require.Less(t, time.Since(start), 10*time.Second)
	st := e.wb.storm.snapshot()
	require.False(t, st.Running)
	require.Contains(t, st.Error, "service is stopping")
	require.FileExists(t, marker, "the storm got SIGINT")
	resp, _ = do(t, c, "POST", e.srv.URL+Prefix+"storm", info.CSRF, `{"scenario":"few"}`)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}
