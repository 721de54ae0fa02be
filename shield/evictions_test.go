package shield

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
)

// TestEvictionsCount (issue 28, metrics): N+K distinct sources, each sent
// once and every way idle when the next arrives, into a table of N = 1024
// (256 sets of 4 ways). A set that draws c of them fills its 4 ways and
// replaces a source for each of the c-4 after: the count is the sum of
// max(0, c-4) over the sets (SetOf, the program's keyed hash), at least K,
// and the table then holds the sum of min(c, 4). A busy set replaces
// nothing: the same again within the fill time adds no eviction.
func TestEvictionsCount(t *testing.T) {
	const (
		n = 1024
		k = 256
	)
	lim := config.ClassLimits{Rate: 1000, Burst: 100, AdmissionRate: 1e6, AdmissionBurst: 1e6} // fill: 0.1 s
	s := loadT(t, Options{TableSize: n, Clock: config.ClockVirtual, Limits: config.Limits{Rate: lim.Rate, Burst: lim.Burst,
		AdmissionRate: lim.AdmissionRate, AdmissionBurst: lim.AdmissionBurst, Unprotected: lim}})
	got, err := s.Evictions()
	require.NoError(t, err)
	require.Zero(t, got, "evictions of a fresh table")

	now := 10 * time.Second
	perSet := map[uint32]int{}
	addrs := make([]netip.Addr, 0, n+k)
	for i := range n + k {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		addrs = append(addrs, a)
		perSet[s.SetOf(a)]++
		now += 200 * time.Millisecond // past the fill time: every way idle
		require.NoError(t, s.SetTime(uint64(now)))
		require.Equal(t, uint32(xdpPass), run(t, s, frame4(a.String())), "stranger %s", a)
	}
	want, held := uint64(0), 0
	for _, c := range perSet {
		want += uint64(max(0, c-4))
		held += min(c, 4)
	}
	got, err = s.Evictions()
	require.NoError(t, err)
	assert.Equal(t, want, got, "evictions after %d sources into %d sets of 4", n+k, len(perSet))
	assert.GreaterOrEqual(t, got, uint64(k), "evictions: at least the K sources past N")
	tracked := 0
	for _, a := range addrs {
		if _, ok, err := s.Source(a); err == nil && ok {
			tracked++
		}
	}
	assert.Equal(t, held, tracked, "sources held")

	// Busy sets: every held source sends again at one instant (its way
	// busy for the fill time), then K new sources at that instant. One
	// whose set has a free way takes it; one whose set is full of busy
	// ways passes untracked. Neither replaces a source.
	now += 200 * time.Millisecond
	require.NoError(t, s.SetTime(uint64(now)))
	for _, a := range addrs {
		if _, ok, err := s.Source(a); err == nil && ok {
			require.Equal(t, uint32(xdpPass), run(t, s, frame4(a.String())), "held source %s", a)
		}
	}
	for i := range k {
		a := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		require.Equal(t, uint32(xdpPass), run(t, s, frame4(a.String())), "stranger %s", a)
	}
	again, err := s.Evictions()
	require.NoError(t, err)
	assert.Equal(t, got, again, "evictions after strangers met busy sets")
	t.Logf("%d sources, %d sets drawn: %d evictions (K = %d), %d held", n+k, len(perSet), got, k, held)
}
