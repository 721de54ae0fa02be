package l7

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"xdpshield/bpf"
)

// connState is what the kernel and the proxy say of each client
// connection the fast path holds: requests and bytes the kernel passed,
// bytes and requests the proxy read.
func (fp *FastPath) connState() string {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	var b strings.Builder
	for cookie, cc := range fp.conns {
		var c bpf.L7Conn
		var ctl bpf.L7Ctl
		fp.objs.Conns.Lookup(cookie, &c)
		fp.objs.Ctls.Lookup(cookie, &ctl)
		fmt.Fprintf(&b, "[conn %d: kernel passed %d requests, %d bytes, sticky %d, expected %d; proxy read %d bytes, %d requests] ",
			cookie, c.Passed, c.PassedBytes, c.Sticky, ctl.Expected, cc.read.Load(), cc.handled.Load())
	}
	return b.String()
}

// TestFastPathPipelinedHandover: two pipelined requests, written in
// pieces of every size, so that the parser sees the first request end with
// the start of the second behind it (the connection goes to the proxy
// whole, sticky) at every offset; both must be answered, as the proxy
// alone answers them. 6.1 and 6.12 lost the tail here (README "Kernels").
// On a kernel Attach refuses it runs against the fallback.
func TestFastPathPipelinedHandover(t *testing.T) {
	d := newDiffEnv(t)
	const pair = "GET /p1 HTTP/1.1\r\nHost: a.test\r\n\r\nGET /p2 HTTP/1.1\r\nHost: a.test\r\n\r\n"
	steps := []int{1, 2, 3, 5, 7, 8, 11, 13, 17, 20, 30, 33, 34, 35, 40, 50, len(pair)}
	bad := 0
	for _, step := range steps {
		for rep := 0; rep < 2; rep++ {
			c, err := d.e.dial(t.Context(), "tcp", d.fast)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			io.WriteString(c, warmup)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if w := readResponses(br, 1); len(w) != 1 || w[0].Status != 200 {
				t.Fatalf("warm-up: %v", w)
			}
			if d.fp != nil {
				d.settle(t)
			}
			for i, ch := range split(pair, step) {
				if i > 0 {
					time.Sleep(2 * time.Millisecond)
				}
				c.Write(ch)
			}
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			r := readResponses(br, 2)
			if len(r) != 2 || r[0].Status != 200 || r[1].Status != 200 || !strings.Contains(r[1].Body, "GET /p2") {
				bad++
				state := ""
				if d.fp != nil {
					state = d.fp.connState()
				}
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				late := readResponses(br, 2-len(r))
				t.Errorf("pieces of %d bytes (try %d): %d answers %v; sent %d bytes; %s; 3 s later: %v",
					step, rep, len(r), r, len(warmup)+len(pair), state, late)
			}
			c.Close()
		}
	}
	if d.fp != nil {
		cnt, _ := d.fp.Counters()
		t.Logf("%d of %d exchanges failed; kernel: sticky %d, sticky_more %d, fast %d", bad, 2*len(steps),
			cnt.Reasons[ReasonSticky], cnt.Reasons[ReasonStickyMore], cnt.Reasons[ReasonFast])
	}
}
