package shield_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/sim"
)

// TestTopFromProgram builds a population through the program itself
// (BPF_PROG_TEST_RUN, virtual clock frozen): source i sends burst+d(i)
// packets, so it passes exactly burst and drops d(i). Top must rank them.
func TestTopFromProgram(t *testing.T) {
	testutil.Root(t)
	const sources, burst = 300, 5
	// A table far larger than the population: in 4096 (1024 sets of 4),
	// 300 sources overflow some set in about 1.4% of seeds.
	sh, err := shield.Load(shield.Options{Clock: config.ClockVirtual, TableSize: 1 << 16,
		Limits: config.Limits{Rate: 1, Burst: burst, AdmissionRate: 1, AdmissionBurst: sources}})
	require.NoError(t, err, "Load")
	defer sh.Close()
	drops := func(i int) int { return (i * 37) % 101 } // distinct for i < 101, repeats after
	addr := func(i int) string {
		if i%3 == 0 {
			return fmt.Sprintf("2001:db8:0:%x::1", i+1) // one /64 each: a source
		}
		return fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)
	}
	for i := range sources {
		frame := sim.From(addr(i), sim.UDP).Bytes()
		for range burst + drops(i) {
			_, err := sim.Run(sh.Program(), frame)
			require.NoError(t, err, "run")
		}
	}
	n, err := sh.CountSources(context.Background())
	require.NoError(t, err, "CountSources()")
	require.Equal(t, sources, n, "CountSources() = %d; want %d", n, sources)
	top, st, err := sh.Top(context.Background(), 10, source.ByDropped)
	require.NoError(t, err, "Top")
	assert.EqualValues(t, sources, st.Scanned, "Top scanned %d, want %d", st.Scanned, sources)
	// drops(i) = 100 for the i with 37i = 100 mod 101, and so on down; among
	// equal counts the lower address comes first.
	want := 100
	for k, s := range top {
		require.False(t, s.Dropped != uint64(want) && !(k > 0 && s.Dropped == top[k-1].Dropped), "Top[%d] = %+v, want %d dropped", k, s, want)
		assert.False(t, s.Passed != burst || !s.Limited, "Top[%d] = %+v, want %d passed and limited", k, s, burst)
		if k > 0 {
			assert.False(t, s.Dropped == top[k-1].Dropped && s.Addr.Less(top[k-1].Addr), "Top[%d] %s listed after %s with the same count", k, s.Addr, top[k-1].Addr)
		}
		if k+1 < len(top) && top[k+1].Dropped != s.Dropped {
			want--
		}
	}
	// The sources with zero drops never show up by dropped, all do by passed.
	all, _, err := sh.Top(context.Background(), source.MaxTop, source.ByDropped)
	require.NoError(t, err)
	zero := 0
	for i := range sources {
		if drops(i) == 0 {
			zero++
		}
	}
	assert.EqualValues(t, sources-zero, len(all), "Top(MaxTop, dropped) has %d sources, want %d", len(all), sources-zero)
	for _, s := range all {
		assert.NotZero(t, s.Dropped, "Top by dropped lists %s with no drops", s.Addr)
	}
	byPassed, _, err := sh.Top(context.Background(), source.MaxTop, source.ByPassed)
	require.NoError(t, err, "Top(MaxTop, passed)")
	require.Len(t, byPassed, sources, "Top(MaxTop, passed) = %d sources; want %d", len(byPassed), sources)
	// Equal passed counts rank by total packets: the order by dropped.
	for k := range all {
		require.EqualValues(t, all[k], byPassed[k], "Top by passed [%d] = %+v, want %+v", k, byPassed[k], all[k])
	}
	for _, bad := range []int{0, -1, source.MaxTop + 1} {
		_, _, err := sh.Top(context.Background(), bad, source.ByDropped)
		assert.Error(t, err, "Top(%d) succeeded, want an error", bad)
	}
}

// TestTopOrders: by dropped and by passed are different rankings. A source
// that passed more but dropped less ranks first by passed and second by
// dropped (TestTopFromProgram's sources all pass the same burst, so there
// the two orders agree whatever the score).
func TestTopOrders(t *testing.T) {
	testutil.Root(t)
	sh, err := shield.Load(shield.Options{Clock: config.ClockVirtual, TableSize: 1024,
		Limits: config.Limits{Rate: 1, Burst: 5, AdmissionRate: 1, AdmissionBurst: 10}})
	require.NoError(t, err, "Load")
	defer sh.Close()
	send := func(addr string, n int) {
		t.Helper()
		frame := sim.From(addr, sim.UDP).Bytes()
		for range n {
			_, err := sim.Run(sh.Program(), frame)
			require.NoError(t, err, "run")
		}
	}
	send("198.18.0.1", 6) // 5 passed, 1 dropped
	require.NoError(t, sh.SetLimits(config.Limits{Rate: 1, Burst: 2, AdmissionRate: 1, AdmissionBurst: 10}))
	send("198.18.0.2", 5) // 2 passed, 3 dropped
	for _, tc := range []struct {
		by   source.TopOrder
		want []string
	}{
		{source.ByDropped, []string{"198.18.0.2", "198.18.0.1"}},
		{source.ByPassed, []string{"198.18.0.1", "198.18.0.2"}},
	} {
		top, _, err := sh.Top(context.Background(), 2, tc.by)
		require.NoError(t, err, "Top(2, %v)", tc.by)
		var got []string
		for _, s := range top {
			got = append(got, s.Addr.String())
		}
		assert.EqualValues(t, strings.Join(tc.want, " "), strings.Join(got, " "), "Top(2, %v) = %v, want %v", tc.by, got, tc.want)
	}
}
