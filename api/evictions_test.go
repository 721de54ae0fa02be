package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/sim"
)

// TestEvictionsExported (issue 28, metrics): N+K distinct sources, each
// sent once with every way idle when the next comes, into a table of N =
// 1024 (256 sets of 4). A set drawing c of them replaces a source for each
// past its 4 ways: shield_sources_evictions_total and GET /v1/counters'
// sources.evictions are the sum of max(0, c-4) over the sets (SetOf, the
// program's keyed hash), at least K; the table holds the sum of min(c, 4)
// (sources.tracked, shield_sources_tracked).
func TestEvictionsExported(t *testing.T) {
	testutil.Root(t)
	const (
		n = 1024
		k = 256
	)
	lim := config.ClassLimits{Rate: 1000, Burst: 100, AdmissionRate: 1e6, AdmissionBurst: 1e6} // fill: 0.1 s
	sh, err := shield.Load(shield.Options{TableSize: n, Clock: config.ClockVirtual, Limits: config.Limits{
		Rate: lim.Rate, Burst: lim.Burst, AdmissionRate: lim.AdmissionRate, AdmissionBurst: lim.AdmissionBurst, Unprotected: lim}})
	require.NoError(t, err)
	t.Cleanup(func() { sh.Close() })
	srv := httptest.NewServer(api.NewServer(sh, api.Options{Token: testToken, NoProcessMetrics: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)

	perSet := map[uint32]int{}
	now := 10 * time.Second
	for i := range n + k {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		perSet[sh.SetOf(a)]++
		now += 200 * time.Millisecond // past the fill time: every way idle
		require.NoError(t, sh.SetTime(uint64(now)))
		v, err := sim.Run(sh.Program(), sim.From(a.String(), sim.UDP).Bytes())
		require.NoError(t, err)
		require.Equal(t, sim.Pass, v, "stranger %s", a)
	}
	want, held := 0, 0
	for _, c := range perSet {
		want += max(0, c-4)
		held += min(c, 4)
	}
	require.GreaterOrEqual(t, want, k, "the sets' arithmetic")
	t.Logf("%d sources into %d sets drawn of 256: %d evictions expected (K = %d), %d held", n+k, len(perSet), want, k, held)

	c := &client.Client{Base: srv.URL, Token: testToken}
	cr, err := c.Counters(context.Background())
	require.NoError(t, err)
	assert.Equal(t, api.SourceStats{Tracked: held, Capacity: n, Evictions: uint64(want)}, cr.Sources, "GET /v1/counters sources")

	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, line := range []string{
		fmt.Sprintf("shield_sources_evictions_total %d\n", want),
		fmt.Sprintf("shield_sources_tracked %d\n", held),
	} {
		assert.Contains(t, string(body), line, "/metrics")
	}
}
