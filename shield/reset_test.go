package shield_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// TestResetIsLoad: a shield that has been through every kind of change
// (limits with an address-specific destination and an aggregate, its own
// ephemeral ports, both lists changed twice, own addresses past the
// configuration's inline ones, the next program, the clock moved, traffic
// from many sources) and is then Reset reads, map by map, variable by
// variable and in its Go state, as it read when Load returned. Every map
// Reset clears is first seen dirtied, so a map Reset forgot fails here.
// shield/datapath runs its hundreds of cases on reset shields.
func TestResetIsLoad(t *testing.T) {
	testutil.Root(t)
	for _, compat := range []bool{false, true} {
		t.Run(fmt.Sprintf("compat=%v", compat), func(t *testing.T) {
			s, err := shield.Load(shield.Options{Compat: compat, TableSize: 4096, Clock: config.ClockVirtual})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			fresh, err := shield.DumpState(s)
			require.NoError(t, err)

			dirty(t, s)
			dirtied, err := shield.DumpState(s)
			require.NoError(t, err)
			for _, part := range []string{"Admission", "Aggregates", "ByteCounters", "Counters", "Lists4[", "Lists4B",
				"Lists6[", "Lists6B", "Next", "Own4Addrs", "Own6Addrs", "Presence", "ProtectedDsts", "Sources",
				"var VirtualNowNs", "config", "go"} {
				if part == "Presence" && s.Compat() {
					continue // shield_compat looks every source up: no filter
				}
				assert.NotEqual(t, only(fresh, part), only(dirtied, part), "%s: not dirtied by the test", part)
			}

			require.NoError(t, s.Reset(config.Limits{}))
			after, err := shield.DumpState(s)
			require.NoError(t, err)
			require.Equal(t, fresh, after, "Reset left what Load does not")

			// And it judges as a fresh shield: a stranger's burst
			// passes, the rest is limited.
			l := s.Limits()
			f := sim.From("198.18.0.77", sim.UDP).Bytes()
			for i := range l.Burst + 1 {
				got, err := sim.Run(s.Program(), f)
				require.NoError(t, err)
				want := sim.Pass
				if i == l.Burst {
					want = sim.Drop
				}
				require.Equal(t, want, got, "frame %d of a new source after Reset", i)
			}
		})
	}
}

// only is the part of a dump whose keys start with prefix.
func only(d map[string]string, prefix string) map[string]string {
	out := map[string]string{}
	for k, v := range d {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// dirty changes every part of s a test of shield/datapath can change.
func dirty(t *testing.T, s *shield.Shield) {
	t.Helper()
	l := config.DefaultLimits()
	l.Protected = append(l.Protected, config.Destination{Proto: counter.ProtoTCP, Port: 8443, Addr: netip.MustParseAddr("198.18.0.9")})
	l.Aggregates = []config.Aggregate{{Destination: config.Destination{Proto: counter.ProtoTCP, Port: 443}, Rate: 1000, Burst: 2000}}
	require.NoError(t, s.SetLimits(l))
	require.NoError(t, s.SetEphemeral(config.PortRange{Lo: 1024, Hi: 2048}))
	for _, c := range []struct {
		l  lists.List
		ps []string
	}{
		{lists.AllowList, []string{"198.18.1.0/24", "2001:db8:1::/48"}},
		{lists.DenyList, []string{"198.18.2.0/24", "2001:db8:2::/48"}},
		{lists.DenyList, []string{"198.18.3.0/24", "2001:db8:3::/48"}},
	} {
		ps, err := lists.ParsePrefixes(c.ps)
		require.NoError(t, err)
		_, err = s.Add(c.l, ps)
		require.NoError(t, err)
	}
	var own []netip.Addr
	for i := range 40 {
		own = append(own, netip.MustParseAddr(fmt.Sprintf("198.18.200.%d", i+1)), netip.MustParseAddr(fmt.Sprintf("2001:db8:200::%x", i+1)))
	}
	_, _, err := s.SetOwn(own)
	require.NoError(t, err)
	require.NoError(t, s.Next().Put(uint32(0), s.Program()))
	require.NoError(t, s.SetTime(5e9))
	for i := range 300 {
		for _, f := range []sim.Frame{
			sim.From(fmt.Sprintf("198.18.%d.%d", 10+i/200, i%200+1), sim.UDP),
			sim.From(fmt.Sprintf("2001:db8:10::%x", i+1), sim.TCP),
		} {
			_, err := sim.Run(s.Program(), f.Bytes())
			require.NoError(t, err)
		}
	}
}
