package l7

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFastPathStickyStall: kept-alive connections whose requests carry
// more than the parser's 512 bytes of headers go to the proxy for good
// (sticky), and each must get every answer. Known to fail here (6.18):
// about 1 in 1,000 such connections stalls at its second request (1 to 3
// of 1,500 in each of nine runs); the kernel counted it passed
// (sticky_more), the proxy's socket holds ~9 KB of receive memory with an
// empty receive queue, and the proxy never reads it. Opt-in
// (L7_STICKY_STALL=1) until that is fixed, so CI does not fail at random;
// README "L7 fast path" says so. Not sticky alone: small GETs passed up by
// a set_header policy stalled 1 connection in 4,500.
func TestFastPathStickyStall(t *testing.T) {
	if os.Getenv("L7_STICKY_STALL") != "1" {
		t.Skip("known to stall about 1 sticky connection in 1,000 (see the comment): L7_STICKY_STALL=1 runs it")
	}
	e := newNS(t)
	b := e.backend(t, "b")
	cfg := Config{Routes: []Route{{Name: "all", PathPrefix: "/", Backends: []string{b.addr}}},
		RBAC: []Rule{{Action: "deny", PathPrefix: "/admin"}}, HashHeader: "X-User"}
	_, fp, fast := e.proxy(t, cfg, true)
	const conns, reqs = 1500, 3
	var stalled atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := e.dial(t.Context(), "tcp", fast)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			req := request("/item", i, 8<<10)
			for k := 0; k < reqs; k++ {
				c.SetDeadline(time.Now().Add(3 * time.Second))
				io.WriteString(c, req)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					stalled.Add(1)
					t.Logf("connection %d, request %d: %v", i, k, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	cnt, err := fp.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if n := stalled.Load(); n != 0 {
		t.Errorf("%d of %d sticky kept-alive connections stalled (kernel: sticky %d, sticky_more %d)", n, conns,
			cnt.Reasons[ReasonSticky], cnt.Reasons[ReasonStickyMore])
	}
}
