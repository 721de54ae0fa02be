package l7

import (
	"bufio"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/l7/policy"
)

// TestFastPathStickyStall: kept-alive connections whose requests carry
// more than the parser's 512 bytes of headers go to the proxy for good
// (sticky), and each must get every answer. With SK_PASS
// (-l7.pass-redirect=off) about 1 in 2,000 such connections stalled at its
// second request on 6.18 (16 of 33,000 in 12 of 22 runs): the kernel
// counted it passed (sticky_more), the proxy's socket held ~9 KB of
// receive memory with an empty receive queue, and the proxy was never
// woken. Redirected to the socket's own ingress (PassRedirect), none of
// 33,000 did. -short runs 200 connections instead of 1,500 (too few to catch
// SK_PASS's stall often: the full run is the one with teeth).
func TestFastPathStickyStall(t *testing.T) {
	e := newNS(t)
	b := e.backend(t, "b")
	cfg := policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b.addr}}},
		RBAC: []policy.Rule{{Action: "deny", PathPrefix: "/admin"}}, HashHeader: "X-User"}
	_, fp, fast := e.proxy(t, cfg, true)
	conns, reqs := 1500, 3
	if testing.Short() {
		conns = 200
	}
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
			if !assert.NoError(t, err) {
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
	require.NoError(t, err)
	n := stalled.Load()
	assert.Zero(t, n, "%d of %d sticky kept-alive connections stalled (kernel: sticky %d, sticky_more %d)", n, conns,
		cnt.Reasons[ReasonSticky], cnt.Reasons[ReasonStickyMore])
}
