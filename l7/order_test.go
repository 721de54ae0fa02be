package l7

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sequence opens a connection to addr, sends each warm-up request and reads
// its answer (they fill the pool), waits for the fast path to settle, then
// sends reqs one after the other (pause apart, without waiting for
// answers) and reads len(reqs) responses.
func (d *diffEnv) sequence(t *testing.T, addr string, warm, reqs []string, pause time.Duration) []response {
	r, _ := d.sequenceRaw(t, addr, warm, reqs, pause)
	return r
}

// sequenceRaw is sequence, also returning the bytes read after the
// warm-ups' answers.
func (d *diffEnv) sequenceRaw(t *testing.T, addr string, warm, reqs []string, pause time.Duration) ([]response, string) {
	t.Helper()
	c, err := d.e.dial(t.Context(), "tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	var raw bytes.Buffer
	tee := &teeSwitch{r: c}
	br := bufio.NewReader(tee)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, w := range warm {
		_, err := io.WriteString(c, w)
		require.NoError(t, err)
		r := readResponses(br, 1)
		require.Len(t, r, 1, "warm-up %q", w)
		require.Equal(t, 200, r[0].Status, "warm-up %q: %v", w, r)
	}
	if addr == d.fast && d.fp != nil {
		d.settle(t)
	}
	require.Zero(t, br.Buffered(), "bytes after the warm-ups' answers")
	tee.w = &raw
	for i, r := range reqs {
		if i > 0 {
			time.Sleep(pause)
		}
		_, err := io.WriteString(c, r)
		require.NoError(t, err)
	}
	methods := make([]string, len(reqs))
	for i, r := range reqs {
		methods[i], _, _ = strings.Cut(r, " ")
	}
	return readResponsesTo(br, methods), raw.String()
}

// teeSwitch reads r, copying what it reads to w once w is set.
type teeSwitch struct {
	r io.Reader
	w io.Writer
}

func (t *teeSwitch) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if t.w != nil {
		t.w.Write(p[:n])
	}
	return n, err
}

// TestL7ResponseOrder is issue 24's finding 2: a connection's responses
// leave in its requests' order, whichever path each request takes. A slow
// request (300 ms at the backend) then, on the same connection, one the
// proxy answers at once (denied), one to another backend (another user),
// and one the kernel hands up (HEAD): the fast path answers as the proxy
// alone does, in order.
func TestL7ResponseOrder(t *testing.T) {
	d := newDiffEnv(t)
	u1, u2 := d.users[0], d.users[1]
	require.NotEqual(t, u1, u2, "two users on two backends")
	get := func(path, user string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: a.test\r\nX-User: " + user + "\r\n\r\n"
	}
	cases := []struct {
		name string
		warm []string
		reqs []string
	}{
		{"slow then denied", []string{warmup(u1)}, []string{get("/slow", u1), get("/admin/secret", u1)}},
		{"two users, two backends", []string{warmup(u1), warmup(u2)}, []string{get("/slow", u1), get("/x", u2)}},
		{"slow then HEAD (handed up)", []string{warmup(u1)}, []string{get("/slow", u1),
			"HEAD /x HTTP/1.1\r\nHost: a.test\r\nX-User: " + u1 + "\r\n\r\n", get("/after", u1)}},
		{"slow then a miss", []string{warmup(u1)}, []string{get("/slow", u1), get("/y", u2)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := d.sequence(t, d.alone, tc.warm, tc.reqs, 30*time.Millisecond)
			require.Len(t, a, len(tc.reqs), "the proxy alone: %v", a)
			before := d.counters(t)
			f := d.sequence(t, d.fast, tc.warm, tc.reqs, 30*time.Millisecond)
			after := d.counters(t)
			assert.Equal(t, fmt.Sprint(a), fmt.Sprint(f), "answers, proxy alone then fast path")
			if d.fp != nil {
				// The slow request itself must have been the kernel's,
				// or the case proves nothing about the fast path.
				assert.NotZero(t, after.Reasons[ReasonFast]-before.Reasons[ReasonFast],
					"requests the kernel took (reasons %v -> %v)", before.Reasons, after.Reasons)
			}
		})
	}
}
