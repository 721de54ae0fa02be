package l7

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/l7/policy"
)

// TestFastPathCloseEndsRelays: a kept-alive connection read through its
// relay, still open when the data plane is closed, is closed by the proxy
// (it reads the relay's end) instead of waiting for requests that can no
// longer reach the relay.
func TestFastPathCloseEndsRelays(t *testing.T) {
	e := newNS(t)
	b := e.backend(t, "b")
	// A data plane of its own, not the pool's: the product's Close (maps
	// closed, not handed back) is what ends the relays here.
	needFast(t)
	opt := testOptions()
	_, fp, addr := e.proxyWith(t, policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{b.addr}}}}, &opt)
	if !fp.Relay {
		t.Skip("no relay sockets on this kernel (TestAttachLoads says whether it should have them)")
	}
	c, err := e.dial(t.Context(), "tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, request("/x", 0, 0))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "first request")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.NoError(t, fp.Close(), "Close")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = br.ReadByte()
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "kept-alive connection after the data plane closed: read = %v, want the proxy's close", err)
	t.Logf("read after Close: %v", err)
}
