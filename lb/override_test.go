package lb

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestAdoptOverrides: changes made through the API (a service replaced
// whole: mode, weights, source ranges, affinity; a service created) are
// in the pinned maps, so the balancer runs them while no process holds
// it; a restart applies the configuration file whole and names each
// change it undoes; a restart that undoes nothing names none.
func TestAdoptOverrides(t *testing.T) {
	testutil.HostOnly(t, "the overrides are Go comparing the services read back from the pins; "+
		"TestPinnedRestart proves adopting pinned maps and TestSourceRanges reading the ranges trie on every kernel")
	e := newEnv(t, 2)
	require.NoError(t, e.lb.Detach()) // the env's own, unpinned balancer
	pins := pinRoot(t)
	bes := backendAddrs(false, 2)
	cfg := lbconf.DefaultConfig()
	cfg.Cgroup = e.cgroup
	cfg.Service = []lbconf.ServiceConfig{{VIP: vip4.String(), Port: 80, Mode: "maglev", Backends: []string{bes[0].String(), bes[1].String()}}}
	k := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP}
	dns := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}

	s1, err := StartPinned(cfg, pins)
	require.NoError(t, err)
	assert.Empty(t, s1.Overrides, "first start")
	require.NoError(t, s1.ReplaceService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random,
		Backends:     []lbconf.Backend{{Addr: bes[0], Weight: 3}, {Addr: bes[1]}},
		SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}, Affinity: time.Minute}))
	require.NoError(t, s1.AddService(lbconf.Service{ServiceKey: dns, Mode: lbconf.Random, Backends: backends(bes[0])}))
	require.NoError(t, s1.Close())

	s2, err := StartPinned(cfg, pins)
	require.NoError(t, err)
	require.True(t, s2.Adopted)
	require.Len(t, s2.Overrides, 2, "overrides: %q", s2.Overrides)
	assert.Contains(t, s2.Overrides[1], "service tcp/198.18.0.100:80: running random [198.18.0.10:8080@3, 198.18.0.11:8080] ranges [198.18.0.0/24] affinity 1m0s, the file says maglev [198.18.0.10:8080, 198.18.0.11:8080]")
	assert.Contains(t, s2.Overrides[0], "service udp/198.18.0.100:53: running")
	assert.Contains(t, s2.Overrides[0], "not in the file: removed")
	for _, o := range s2.Overrides {
		assert.Contains(t, s2.Notes, "the configuration file overrides the running balancer: "+o)
	}
	got := s2.Services()
	require.Len(t, got, 1)
	assert.Equal(t, lbconf.Maglev, got[0].Mode)
	assert.Empty(t, got[0].SourceRanges)
	assert.Zero(t, got[0].Affinity)
	require.NoError(t, s2.Close())

	s3, err := StartPinned(cfg, pins)
	require.NoError(t, err)
	assert.Empty(t, s3.Overrides, "a restart with nothing changed")
	require.NoError(t, s3.Close())
}
