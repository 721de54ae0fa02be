package shield_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/sim"
)

// TestPresenceFilter: no known source is ever refused as a stranger, while
// the admission bucket is empty, whatever the presence filter has been
// through: sources admitted before a refresh (found by its walk) and
// sources admitted during one after its walk (their bits set by the program
// in the filter being rebuilt), across two refreshes, so both filters
// answer once. Strangers past the admission burst are still refused. Also
// with shield_compat, which looks every source up.
func TestPresenceFilter(t *testing.T) {
	testutil.Root(t)
	for _, compat := range []bool{false, true} {
		t.Run(fmt.Sprintf("compat=%v", compat), func(t *testing.T) { testPresenceFilter(t, compat) })
	}
}

func testPresenceFilter(t *testing.T, compat bool) {
	const n = 40
	s, err := shield.Load(shield.Options{TableSize: 1 << 16, Clock: config.ClockVirtual, Compat: compat,
		Limits: config.Limits{Rate: 1e6, Burst: 1e6, AdmissionRate: 1, AdmissionBurst: 3*n + 10}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	var next int
	stranger := func() string {
		next++
		return fmt.Sprintf("198.18.%d.%d", next>>8, next&255)
	}
	run := func(src string) sim.Action {
		t.Helper()
		got, err := sim.Run(s.Program(), sim.From(src, sim.UDP).Bytes())
		require.NoError(t, err)
		return got
	}
	admit := func(k int) []string {
		t.Helper()
		var out []string
		for range k {
			a := stranger()
			require.Equal(t, sim.Pass, run(a), "admit %s", a)
			out = append(out, a)
		}
		return out
	}
	known := admit(n)
	for round := range 2 {
		var during []string
		shield.SetAfterFilterWalk(s, func() { during = admit(n) })
		st, err := s.RefreshFilter(context.Background())
		require.NoError(t, err, "RefreshFilter() round %d", round)
		require.Equal(t, uint32(1-round), st.Filter, "RefreshFilter().Filter round %d", round)
		require.GreaterOrEqual(t, st.Scanned, len(known), "RefreshFilter().Scanned round %d", round)
		known = append(known, during...)
	}
	// Drain the admission bucket: the first refused stranger.
	refused := 0
	for range 3*n + 20 {
		if run(stranger()) == sim.Drop {
			refused++
			break
		}
	}
	require.Equal(t, 1, refused, "a stranger refused once the admission burst is spent")
	for _, a := range known {
		require.Equal(t, sim.Pass, run(a), "known source %s with the admission bucket empty", a)
	}
	require.Equal(t, sim.Drop, run(stranger()), "another stranger")
	st, err := s.Filter()
	require.NoError(t, err)
	// shield_compat neither reads the filter nor sets bits (no atomic OR
	// before 5.12): there only the last refresh's walk did.
	if !s.Compat() {
		require.GreaterOrEqual(t, st.Set, len(known)*9/10, "Filter().Set: about one bit per known source")
	}
	t.Logf("filter %d: %d bits set for %d known sources (fill %.6f)", st.Filter, st.Set, len(known), st.Fill)
}
