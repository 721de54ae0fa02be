package datapath

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
	shsource "github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/sim"
)

// TestFloodEvictsBySet measures what a forged flood, every forged source
// admitted (256 new sources/s, 8 times the table over the run), does to
// known sources of a 1024-source table (256 sets of 4): how often a known
// source is no longer tracked when it comes back after a period of
// silence, for three periods. A forged source lands in a known source's
// set at 1/s (the keyed hash spreads them), so a source idle for T is
// replaced once 4 insertions reach its set: with probability
// P(Poisson(T x 1/s) >= 4) (3 when another known source holds a way).
//
//   - every 31 ms, under its buckets' fill time (0.1 s): never idle, so
//     never replaced (a busy way never is: TestFloodSparesBusySet); the
//     global LRU kept it too.
//   - every 2 s: replaced in 15-26% of its periods, where the old global
//     LRU (1024 entries, 512 insertions per period) replaced none: a
//     set-associative table loses a source idle for a fraction of the
//     table's turnover (size / admission rate, 4 s here) that the LRU kept.
//   - every 8 s, twice the turnover: replaced in most periods, as it was
//     by the LRU (2048 insertions per period).
//
// The bands are wide (the hash's keys are random per load); a table that
// always replaced its first way fails the first group (red once so).
func TestFloodEvictsBySet(t *testing.T) {
	const (
		table   = 1024
		perSec  = 256 // forged sources admitted per second
		gap     = time.Second / perSec
		steps   = 8 * table // the flood's length in gaps: 32 s
		perKind = 32        // known sources per period
	)
	lim := config.ClassLimits{Rate: 1000, Burst: 100, AdmissionRate: 1e6, AdmissionBurst: 1e6} // fill: 0.1 s
	s := load(t, table, config.Limits{Rate: lim.Rate, Burst: lim.Burst, AdmissionRate: lim.AdmissionRate,
		AdmissionBurst: lim.AdmissionBurst, Unprotected: lim})
	kinds := []struct {
		name    string
		every   int // gaps
		lo, hi  float64
		lruLoss float64 // the global LRU's: in a period, perSec*every/gap insertions against 1024 entries
	}{
		{"every 31ms", 8, 0, 0, 0},
		{"every 2s", 512, 0.05, 0.4, 0},
		{"every 8s", 2048, 0.8, 1, 1},
	}
	type known struct {
		frame        []byte
		addr         netip.Addr
		phase, every int
		sent, lost   int
	}
	// Known sources at random addresses of 198.18.0.0/15: the hash is
	// pairwise independent, and addresses in arithmetic progression (one
	// /24's) can share sets more often than chance in a table of 256 sets
	// (in the default one of 262,144, a /24 puts five in one set with odds
	// of about 1 in 2,000).
	rng := rand.New(rand.NewPCG(13, 13))
	seen := map[netip.Addr]bool{}
	var all [][]*known
	for _, kind := range kinds {
		var ks []*known
		for i := range perKind {
			var a netip.Addr
			for !a.IsValid() || seen[a] {
				r := rng.Uint32()
				a = netip.AddrFrom4([4]byte{198, 18 + byte(r>>16)&1, byte(r >> 8), byte(r)})
			}
			seen[a] = true
			ks = append(ks, &known{frame: sim.From(a.String(), sim.UDP).Bytes(), addr: a,
				phase: i * kind.every / perKind, every: kind.every})
		}
		all = append(all, ks)
	}
	run := func(f []byte, what string) {
		got, err := sim.Run(s.Program(), f)
		require.NoError(t, err)
		require.Equal(t, sim.Pass, got, "%s: every stranger is admitted here", what)
	}
	for step := range steps {
		require.NoError(t, s.SetTime(uint64(10*time.Second+time.Duration(step)*gap)))
		// A forged source: a random /64 under 2001:db8::/32 (sequential
		// ones would reach each set at a steadier pace than a flood's).
		r := rng.Uint32()
		f := sim.From(fmt.Sprintf("2001:db8:%x:%x::1", r>>16, r&0xffff), sim.UDP).Bytes()
		run(f, "forged")
		for _, ks := range all {
			for _, k := range ks {
				if step%k.every != k.phase {
					continue
				}
				if k.sent > 0 {
					_, ok, err := s.Source(k.addr)
					require.NoError(t, err)
					if !ok {
						k.lost++
					}
				}
				k.sent++
				run(k.frame, k.addr.String())
			}
		}
	}
	for i, kind := range kinds {
		periods, lost := 0, 0
		for _, k := range all[i] {
			periods += k.sent - 1
			lost += k.lost
		}
		share := float64(lost) / float64(periods)
		expect := 1 - poissonCDF(3, float64(kind.every)*float64(gap)/float64(time.Second)*perSec*4/table)
		t.Logf("%s: replaced in %d of %d periods (%.3f; 4 insertions into its set: %.3f; global LRU: %.0f)",
			kind.name, lost, periods, share, expect, kind.lruLoss)
		assert.False(t, share < kind.lo || share > kind.hi, "%s: known sources replaced in %.3f of their periods (%d of %d), want [%.2f, %.2f]",
			kind.name, share, lost, periods, kind.lo, kind.hi)
	}
}

// poissonCDF is P(X <= k) for X ~ Poisson(mean).
func poissonCDF(k int, mean float64) float64 {
	p, term := 0.0, math.Exp(-mean)
	for i := 0; i <= k; i++ {
		p += term
		term *= mean / float64(i+1)
	}
	return p
}

// TestFloodSparesBusySet aims a flood at one set (the test knows the hash's
// keys; an attacker does not, TestHashCannotBeAimed) while the set is full
// of known sources that each send within their buckets' fill time: every
// forged stranger is admitted and passes, but none takes a busy way, so no
// known source is ever lost; strangers arriving while the set is full stay
// untracked. Once the known sources fall silent for a fill time their ways
// idle and strangers take them. Red with a busy way replaced (the least
// recently used one, as for an idle set).
func TestFloodSparesBusySet(t *testing.T) {
	const table = 64                                                                           // 16 sets
	lim := config.ClassLimits{Rate: 1000, Burst: 100, AdmissionRate: 1e6, AdmissionBurst: 1e6} // fill: 0.1 s
	s := load(t, table, config.Limits{Rate: lim.Rate, Burst: lim.Burst, AdmissionRate: lim.AdmissionRate,
		AdmissionBurst: lim.AdmissionBurst, Unprotected: lim})
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}) }
	target := s.SetOf(addr(0))
	var known, forged []netip.Addr
	for i := 0; len(known) < shsource.Ways || len(forged) < 200; i++ {
		a := addr(i)
		switch {
		case s.SetOf(a) != target:
		case len(known) < shsource.Ways:
			known = append(known, a)
		default:
			forged = append(forged, a)
		}
	}
	now := 10 * time.Second
	send := func(a netip.Addr) {
		t.Helper()
		require.NoError(t, s.SetTime(uint64(now)))
		got, err := sim.Run(s.Program(), sim.From(a.String(), sim.UDP).Bytes())
		require.NoError(t, err)
		require.Equal(t, sim.Pass, got, "%s: every source is within its limits here", a)
	}
	tracked := func(a netip.Addr) bool {
		t.Helper()
		_, ok, err := s.Source(a)
		require.NoError(t, err)
		return ok
	}
	for _, k := range known {
		send(k)
	}
	// Each known source sends every 40 ms (under the 0.1 s fill time); a
	// forged stranger reaches the set every 10 ms.
	for i, f := range forged {
		now += 10 * time.Millisecond
		send(f)
		if i%4 == 0 {
			for _, k := range known {
				send(k)
			}
		}
		require.False(t, tracked(f), "forged %s took a way of a set whose every source is busy", f)
	}
	for _, k := range known {
		require.True(t, tracked(k), "known %s lost to the flood", k)
	}
	// Silent for over a fill time: the ways idle, and a stranger takes one.
	now += 200 * time.Millisecond
	send(forged[0])
	require.True(t, tracked(forged[0]), "a stranger found no idle way in a set of silent sources")
}
