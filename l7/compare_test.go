package l7

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// request is connection i's GET of path, padded with an X-Pad header to
// size bytes when size is beyond the plain request's.
func request(path string, i, size int) string {
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: a.test\r\nX-User: user%d\r\n\r\n", path, i)
	const pad = len("X-Pad: \r\n")
	if size < len(req)+pad {
		return req
	}
	return strings.TrimSuffix(req, "\r\n") + "X-Pad: " + strings.Repeat("a", size-len(req)-pad) + "\r\n\r\n"
}

// load runs conns connections, each sending n GETs of size bytes (0: the
// plain small GET) one after the other (closed loop, kept alive), and
// returns every latency and the elapsed time. With deny the GETs are of a
// denied path and must be answered 403.
func (e *nsEnv) load(t *testing.T, addr string, conns, n, size int, deny bool) ([]time.Duration, time.Duration) {
	t.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	start := time.Now()
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := e.dial(t.Context(), "tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			path, want := "/item", 200
			if deny {
				path, want = "/admin", 403
			}
			req := request(path, i, size)
			if size > 0 && len(req) != size {
				errs <- fmt.Errorf("request of %d bytes, want %d", len(req), size)
				return
			}
			local := make([]time.Duration, 0, n)
			// 200 connections on 5.10 under TCG, the whole package at
			// load 15, once left one request unanswered for 10 s
			// (alone, 18 s for all).
			guard := testutil.HangGuard(10 * time.Second)
			for k := 0; k < n; k++ {
				c.SetDeadline(time.Now().Add(guard))
				t0 := time.Now()
				if _, err := io.WriteString(c, req); err != nil {
					errs <- err
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(t, err, "load on %s (%d-byte requests, deny %v)", addr, size, deny)
	}
	return lat, el
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// TestL7Compare measures, side by side in one namespace and one run, a
// direct connection to the backend, the Go proxy alone and the fast path,
// at the same offered load (the same closed loop), rounds interleaved.
// L7_COMPARE_ROUNDS, _CONNS and _REQS change the load; L7_COMPARE_SWEEP=1
// adds the header-size sweep (_SWEEP_REQS GETs a connection per size).
func TestL7Compare(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement: not in -short")
	}
	rounds, conns, reqs := envInt("L7_COMPARE_ROUNDS", 3), envInt("L7_COMPARE_CONNS", 4), envInt("L7_COMPARE_REQS", 1000)
	e := newNS(t)
	b := e.backend(t, "b")
	cfg := policy.Config{
		Routes:     []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b.addr}}},
		RBAC:       []policy.Rule{{Action: "deny", PathPrefix: "/admin"}},
		HashHeader: "X-User",
	}
	_, _, alone := e.proxy(t, cfg, false)
	_, fp, fast := e.proxy(t, cfg, true)
	// The same policy plus a header to set, which the kernel does not
	// implement: every request is parsed, then passed up (the fallback's
	// cost over the proxy alone).
	cfgSet := cfg
	cfgSet.SetHeader = policy.Header{Name: "X-Set", Value: "1"}
	_, fpSet, passed := e.proxy(t, cfgSet, true)
	total := uint64(rounds * conns * reqs)
	type result struct {
		lat []time.Duration
		el  time.Duration
	}
	names := []string{"direct", "proxy alone", "fast path", "fast path, all passed up (set_header)"}
	addrs := []string{b.addr, alone, fast, passed}
	res := make([]result, len(names))
	for i, n := range names {
		t.Logf("%s: %s", n, addrs[i])
	}
	before, err := fp.Counters()
	require.NoError(t, err)
	beforeSet, err := fpSet.Counters()
	require.NoError(t, err)
	for r := 0; r < rounds; r++ {
		for i, a := range addrs {
			lat, el := e.load(t, a, conns, reqs, 0, false)
			res[i].lat = append(res[i].lat, lat...)
			res[i].el += el
		}
	}
	after, err := fp.Counters()
	require.NoError(t, err)
	afterSet, err := fpSet.Counters()
	require.NoError(t, err)
	got := afterSet.Slow() - beforeSet.Slow()
	assert.False(t, got != total || afterSet.Reasons[ReasonFast] != beforeSet.Reasons[ReasonFast],
		"set_header policy passed %d of %d requests up and took %d fast, want all passed", got, total,
		afterSet.Reasons[ReasonFast]-beforeSet.Reasons[ReasonFast])
	fastN := after.Reasons[ReasonFast] - before.Reasons[ReasonFast]
	slowN := after.Slow() - before.Slow()
	assert.EqualValues(t, total, fastN+slowN, "fast %d + slow %d = %d requests, want %d sent", fastN, slowN, fastN+slowN, total)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d rounds x %d connections x %d GETs (closed loop, keep-alive), %d bytes of request\n", rounds, conns, reqs, len("GET /item HTTP/1.1\r\nHost: a.test\r\nX-User: user0\r\n\r\n"))
	fmt.Fprintf(&sb, "| path | p50 | p99 | requests/s | on the slow path |\n|---|---|---|---|---|\n")
	for i, n := range names {
		slow := "-"
		switch i {
		case 1:
			slow = "100%"
		case 3:
			slow = "100%"
		case 2:
			slow = fmt.Sprintf("%.2f%% (%d of %d)", 100*float64(slowN)/float64(total), slowN, total)
		}
		fmt.Fprintf(&sb, "| %s | %v | %v | %.0f | %s |\n", n, pct(res[i].lat, 0.50).Round(time.Microsecond),
			pct(res[i].lat, 0.99).Round(time.Microsecond), float64(len(res[i].lat))/res[i].el.Seconds(), slow)
	}
	assert.False(t, fastN < total*9/10, "fast path took %d of %d requests, want at least 90%% (one miss per connection)", fastN, total)

	// Denied requests (403): the kernel matches the rule and passes them
	// up (deny), the proxy answers; against the proxy alone, what a 403
	// from the kernel could save at most.
	beforeDeny, err := fp.Counters()
	require.NoError(t, err)
	dn := make([]result, 2)
	for r := 0; r < rounds; r++ {
		for i, a := range []string{alone, fast} {
			lat, el := e.load(t, a, conns, reqs/4, 0, true)
			dn[i].lat = append(dn[i].lat, lat...)
			dn[i].el += el
		}
	}
	afterDeny, err := fp.Counters()
	require.NoError(t, err)
	denyTotal := uint64(rounds * conns * (reqs / 4))
	d, f := afterDeny.Reasons[ReasonDeny]-beforeDeny.Reasons[ReasonDeny], afterDeny.Reasons[ReasonFast]-beforeDeny.Reasons[ReasonFast]
	assert.False(t, f != 0 || d+(afterDeny.Reasons[ReasonBusy]-beforeDeny.Reasons[ReasonBusy]) != denyTotal || d == 0, "denied GETs: kernel counted %d deny, %d fast, want all %d passed up as deny (or busy)", d, f, denyTotal)
	fmt.Fprintf(&sb, "\ndenied GETs (403, answered by the proxy): %d rounds x %d connections x %d\n", rounds, conns, reqs/4)
	fmt.Fprintf(&sb, "| path | p50 | p99 | requests/s |\n|---|---|---|---|\n")
	for i, n := range []string{"proxy alone", "fast path (kernel matches, passes up)"} {
		fmt.Fprintf(&sb, "| %s | %v | %v | %.0f |\n", n, pct(dn[i].lat, 0.50).Round(time.Microsecond),
			pct(dn[i].lat, 0.99).Round(time.Microsecond), float64(len(dn[i].lat))/dn[i].el.Seconds())
	}

	// The header-size sweep: requests of 1 to 16 KB (an X-Pad header),
	// direct, through the proxy alone and through the fast path. Beyond
	// the parser's 512 bytes a connection is the proxy's for good
	// (sticky): the fast path's cost is the parse and the hand-over.
	// Opt-in (L7_COMPARE_SWEEP=1): about one run in four, one sticky
	// kept-alive connection stalls (TestFastPathStickyStall), which would
	// make this measurement fail CI at random.
	if os.Getenv("L7_COMPARE_SWEEP") != "1" {
		t.Log("\n" + sb.String() + "\n(header-size sweep: L7_COMPARE_SWEEP=1)")
		return
	}
	sweepReqs := envInt("L7_COMPARE_SWEEP_REQS", 250)
	sweepTotal := uint64(rounds * conns * sweepReqs)
	fmt.Fprintf(&sb, "\nheader-size sweep: %d rounds x %d connections x %d GETs per size\n", rounds, conns, sweepReqs)
	fmt.Fprintf(&sb, "| request | path | p50 | p99 | requests/s | on the slow path |\n|---|---|---|---|---|---|\n")
	for _, kb := range []int{1, 2, 4, 8, 16} {
		before, err := fp.Counters()
		require.NoError(t, err)
		sw := make([]result, 3)
		for r := 0; r < rounds; r++ {
			for i, a := range addrs[:3] {
				lat, el := e.load(t, a, conns, sweepReqs, kb<<10, false)
				sw[i].lat = append(sw[i].lat, lat...)
				sw[i].el += el
			}
		}
		after, err := fp.Counters()
		require.NoError(t, err)
		fastN := after.Reasons[ReasonFast] - before.Reasons[ReasonFast]
		sticky := after.Reasons[ReasonSticky] - before.Reasons[ReasonSticky]
		assert.False(t, fastN != 0 || sticky != uint64(rounds*conns),
			"%d KB requests: %d fast, %d connections sticky, want 0 fast and all %d sticky (headers beyond the parse bound)",
			kb, fastN, sticky, rounds*conns)
		for i, n := range names[:3] {
			slow := "-"
			switch i {
			case 1:
				slow = "100%"
			case 2:
				slow = fmt.Sprintf("%.0f%% (sticky)", 100*float64(sweepTotal-fastN)/float64(sweepTotal))
			}
			fmt.Fprintf(&sb, "| %d KB | %s | %v | %v | %.0f | %s |\n", kb, n, pct(sw[i].lat, 0.50).Round(time.Microsecond),
				pct(sw[i].lat, 0.99).Round(time.Microsecond), float64(len(sw[i].lat))/sw[i].el.Seconds(), slow)
		}
	}
	t.Log("\n" + sb.String())
}

func envInt(name string, def int) int {
	var v int
	if s := os.Getenv(name); s != "" {
		if _, err := fmt.Sscan(s, &v); err == nil && v > 0 {
			return v
		}
	}
	return def
}
