package api_test

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/xdplb"
)

const xdplbGood = `{"next_hop":"02:00:00:00:00:03","source4":"198.18.0.2","vips":[
 {"addr":"198.18.100.1","port":80,"proto":"tcp","backends":[{"addr":"198.18.1.1"},{"addr":"198.18.1.2","weight":2}]}]}`

// TestXDPLBAPI: GET and PUT /v1/xdplb; a change needs the token; a
// configuration the balancer refuses is a 400 naming the problem and
// changes nothing; a good one is in force at once, and on /metrics.
func TestXDPLBAPI(t *testing.T) {
	testutil.Root(t)
	b, err := xdplb.Load()
	require.NoError(t, err, "xdplb.Load()")
	t.Cleanup(func() { b.Close() })
	e := newEnv(t, api.Options{XDPLB: b})
	c := e.client()
	ctx := context.Background()

	r, err := c.XDPLB(ctx)
	require.NoError(t, err, "GET /v1/xdplb")
	assert.Empty(t, r.Config.VIPs, "VIPs before any PUT")

	code, _ := e.do(t, "PUT", "/v1/xdplb", "", xdplbGood)
	assert.Equal(t, http.StatusUnauthorized, code, "PUT without token")
	for _, tc := range []struct{ body, want string }{
		{strings.Replace(xdplbGood, `"tcp"`, `"sctp"`, 1), `sctp`},
		{strings.Replace(xdplbGood, `"198.18.1.1"`, `"2001:db8::1"`, 1), "not of the VIP's family"},
		{strings.Replace(xdplbGood, `,"source4":"198.18.0.2"`, ``, 1), "IPv4 VIP needs source4"},
		{strings.Replace(xdplbGood, `"02:00:00:00:00:03"`, `"nope"`, 1), "nope"},
	} {
		code, body := e.do(t, "PUT", "/v1/xdplb", "Bearer "+testToken, tc.body)
		assert.Equal(t, http.StatusBadRequest, code, "PUT %s: %s", tc.body, body)
		assert.Contains(t, body, tc.want, "PUT %s", tc.body)
	}
	r, err = c.XDPLB(ctx)
	require.NoError(t, err)
	assert.Empty(t, r.Config.VIPs, "VIPs after refused PUTs")

	code, body := e.do(t, "PUT", "/v1/xdplb", "Bearer "+testToken, xdplbGood)
	require.Equal(t, http.StatusOK, code, "PUT: %s", body)
	r, err = c.XDPLB(ctx)
	require.NoError(t, err)
	require.Len(t, r.Config.VIPs, 1)
	assert.Equal(t, "198.18.100.1:80/tcp", r.Config.VIPs[0].String())
	assert.Contains(t, r.Stats.VIPs, "198.18.100.1:80/tcp", "stats per VIP")
	assert.Contains(t, r.Stats.Backends, netip.MustParseAddr("198.18.1.2"), "stats per backend")
	assert.Len(t, b.Table("198.18.100.1:80/tcp"), xdplb.RingSize, "the table in force")

	resp, err := http.Get(e.srv.URL + "/metrics")
	require.NoError(t, err)
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`shield_xdplb_vip_packets_total{vip="198.18.100.1:80/tcp"} 0`,
		`shield_xdplb_backend_packets_total{backend="198.18.1.2"} 0`,
		`shield_xdplb_packets_total{reason="too_big"} 0`,
	} {
		assert.Contains(t, string(text), want+"\n", "/metrics")
	}
}
