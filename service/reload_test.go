package service

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// TestReload: a reload changes the limits and the lists' configured
// entries (keeping those added through the API), and one whose deny list
// is over capacity changes nothing, although the limits and the allow
// list it also changes were valid and written first.
func TestReload(t *testing.T) {
	testutil.Root(t)
	a, _, root := testEdge(t, "rl", "rla", "rlb")
	p := netip.MustParsePrefix
	allow1, allow2 := p("198.18.1.0/24"), p("198.18.2.0/24")
	deny1, deny2, byAPI := p("198.18.7.0/24"), p("2001:db8:7::/48"), p("198.18.9.9/32")
	lim := config.DefaultLimits()
	cfg := Config{Iface: "rla", PinRoot: root, TableSize: 4096, Limits: lim,
		Allow: []netip.Prefix{allow1}, Deny: []netip.Prefix{deny1},
		API: API{Listen: "127.0.0.1:0", NoProcessMetrics: true}}
	var s *Service
	require.NoError(t, a.Do(func() error {
		var err error
		s, err = Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		return err
	}))
	defer s.Close()
	sh := s.Shield()
	_, err := sh.Add(lists.DenyList, []netip.Prefix{byAPI})
	require.NoError(t, err)
	lists := func() (allow, deny []netip.Prefix) {
		t.Helper()
		allow, err := sh.List(lists.AllowList)
		require.NoError(t, err)
		deny, err = sh.List(lists.DenyList)
		require.NoError(t, err)
		return allow, deny
	}

	// Over capacity: one more prefix than the deny list holds.
	var many []netip.Prefix
	for i := range int(bpf.ShieldListCapacityMAX_LIST_ENTRIES) + 1 {
		many = append(many, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 32))
	}
	bad := lim
	bad.Rate = 77
	err = s.Reload(Reload{Limits: bad, Allow: []netip.Prefix{allow2}, Deny: many})
	require.Error(t, err, "a deny list over capacity")
	require.Equal(t, lim.Rate, sh.Limits().Rate, "limits after a refused reload")
	allow, deny := lists()
	require.Equal(t, []netip.Prefix{allow1}, allow, "allow list after a refused reload")
	require.ElementsMatch(t, []netip.Prefix{deny1, byAPI}, deny, "deny list after a refused reload")

	good := lim
	good.Rate, good.Burst = 77, 99
	require.NoError(t, s.Reload(Reload{Limits: good, Allow: []netip.Prefix{allow2}, Deny: []netip.Prefix{deny2}}))
	require.Equal(t, uint64(77), sh.Limits().Rate)
	require.Equal(t, uint64(99), sh.Limits().Burst)
	allow, deny = lists()
	require.Equal(t, []netip.Prefix{allow2}, allow, "allow list: the old configured entry gone, the new one there")
	require.ElementsMatch(t, []netip.Prefix{deny2, byAPI}, deny, "deny list: the API's entry kept")

	// The configuration reloaded is the next reload's reference.
	require.NoError(t, s.Reload(Reload{Limits: good}))
	allow, deny = lists()
	require.Empty(t, allow)
	require.Equal(t, []netip.Prefix{byAPI}, deny)
}
