package l7

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/l7/policy"
)

// TestL7BackendConnectionClose is issue 24's finding 7, first half: a
// backend's "Connection: close" is hop-by-hop; the proxy drops it and
// keeps the client's connection, and so must the fast path (before, the
// kernel passed the backend's bytes on raw).
func TestL7BackendConnectionClose(t *testing.T) {
	d := newDiffEnv(t)
	u := d.users[0]
	get := func(path string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: a.test\r\nX-User: " + u + "\r\n\r\n"
	}
	reqs := []string{get("/close"), get("/x")}
	// net/http's reader drops "Connection: close" from the headers it
	// returns: the raw bytes say whether it reached the client.
	a, rawA := d.sequenceRaw(t, d.alone, []string{warmup(u)}, reqs, 30*time.Millisecond)
	require.Len(t, a, 2, "the proxy alone: %v", a)
	require.NotContains(t, strings.ToLower(rawA), "connection:", "the proxy alone passes the backend's Connection header on")
	before := d.counters(t)
	f, rawF := d.sequenceRaw(t, d.fast, []string{warmup(u)}, reqs, 30*time.Millisecond)
	after := d.counters(t)
	assert.Equal(t, fmt.Sprint(a), fmt.Sprint(f), "answers, proxy alone then fast path")
	assert.NotContains(t, strings.ToLower(rawF), "connection:", "the fast path's bytes: %q", rawF)
	if d.fp != nil {
		assert.NotZero(t, after.Reasons[ReasonFast]-before.Reasons[ReasonFast],
			"the kernel took GET /close (reasons %v -> %v)", before.Reasons, after.Reasons)
	}
}

// TestL7BackendDials is finding 7, second half: at most one backend
// connection per client request. 20 client connections of 2 requests each
// to a route of 4 backends (before: a miss filled the pool with a socket
// to every backend of the route, 4 a connection); then requests to a
// backend that closes every connection after its answer (before: a miss
// dialed twice, the proxy's connection and a pooled one the backend closed
// after one answer).
func TestL7BackendDials(t *testing.T) {
	e := newNS(t)
	var bs []*nsBackend
	var addrs []string
	for i := range 4 {
		b := e.backend(t, fmt.Sprintf("b%d", i))
		bs = append(bs, b)
		addrs = append(addrs, b.addr)
	}
	conns := func() (n int64) {
		for _, b := range bs {
			n += b.conns.Load()
		}
		return n
	}
	_, fp, addr := e.proxy(t, policy.Config{
		Routes:     []policy.Route{{Name: "all", PathPrefix: "/", Backends: addrs}},
		HashHeader: "X-User",
	}, true)
	do := func(c *http.Client, path, user string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+addr+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-User", user)
		resp, err := c.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "%s: %s", path, body)
		require.True(t, strings.HasPrefix(string(body), "b"), "%s: %s", path, body)
	}
	const clients, each = 20, 2
	start := conns()
	for i := range clients {
		c := e.client()
		for range each {
			do(c, "/x", fmt.Sprintf("user%d", i))
			time.Sleep(5 * time.Millisecond) // the pool fills between requests
		}
		c.CloseIdleConnections()
	}
	got := conns() - start
	t.Logf("%d client connections of %d requests: %d backend connections", clients, each, got)
	assert.LessOrEqual(t, got, int64(clients*each), "backend connections for %d requests", clients*each)

	const closing = 10
	start = conns()
	before, err := fp.Counters()
	require.NoError(t, err)
	c := e.client()
	for range closing {
		do(c, "/close", "carol")
		time.Sleep(5 * time.Millisecond)
	}
	after, err := fp.Counters()
	require.NoError(t, err)
	got = conns() - start
	t.Logf("%d requests to a backend closing after each answer: %d backend connections (reasons %v -> %v)",
		closing, got, before.Reasons, after.Reasons)
	assert.LessOrEqual(t, got, int64(closing), "backend connections for %d requests answered with Connection: close", closing)
}
