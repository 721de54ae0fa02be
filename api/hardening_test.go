package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
)

// TestUnauthorizedFloodLogsBounded (issue 10, finding 7): 2000 requests
// without the token wrote 2000 WARN lines, each with a `who` the stranger
// chose. Now a burst is logged, then a line a second that counts what was
// held back, and the claimed name is logged as a claim, charset-bounded.
func TestUnauthorizedFloodLogsBounded(t *testing.T) {
	e := newEnv(t, api.Options{})
	// Unbounded logging would write every one; the bound allows 10 + 1 a
	// second. -short (the VM matrix, where a request costs ~10 ms) sends
	// fewer, still far beyond the bound.
	flood := 2000
	if testing.Short() {
		flood = 300
	}
	start := time.Now()
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	send := func() {
		req, _ := http.NewRequest("PUT", e.srv.URL+"/v1/limits", strings.NewReader("{}"))
		req.Header.Set(api.OperatorHeader, "alice@ops\" level=ERROR msg=forged")
		resp, err := cl.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.False(t, resp.StatusCode != http.StatusUnauthorized, "PUT without a token = %d, want 401", resp.StatusCode)
	}
	for range flood {
		send()
	}
	elapsed := time.Since(start)
	lines := strings.Count(e.log.String(), "api unauthorized")
	// The burst, one a second after it, one for rounding.
	most := 10 + int(elapsed.Seconds()) + 1
	assert.LessOrEqual(t, lines, most, "%d unauthorized requests in %v wrote %d log lines, want at most %d", flood, elapsed, lines, most)
	assert.False(t, lines == 0, "no unauthorized request was logged")
	time.Sleep(1100 * time.Millisecond)
	send()
	logs := e.log.String()
	assert.Contains(t, logs, "suppressed=", "no line says how many unauthorized requests were not logged:\n%s", tail(logs, 3))
	assert.False(t, strings.Contains(logs, "who=") || strings.Contains(logs, "level=ERROR"), "an unauthorized request's operator header reached the log as who or as a field:\n%s", tail(logs, 3))
}

func tail(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}
