package xdplb_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/lb/maglev"
	"github.com/xdpshield/xdpshield/xdplb"
)

// TestMaglevDisruption: removing one of n backends moves the new-flow
// choice of about 1/n of the table (the removed backend's slots, Maglev's
// near-minimal disruption, Eisenbud et al. NSDI 2016 section 3.4), where
// hashing modulo n moves about (n-1)/n. (nftables' `jhash ... mod n` is
// not a modulo: it splits the hash range into n, so removing one of n
// moves about half whatever n; xdplb's TestCompareBalancers measures it.)
// Established flows keep their backend in both through state
// (the connection table, conntrack); this is what new flows see, and
// what every flow sees after the state is lost.
func TestMaglevDisruption(t *testing.T) {
	for _, n := range []int{3, 5, 10} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("198.18.1.%d", i+1)
		}
		before := maglev.Table(names, nil, xdplb.RingSize)
		after := maglev.Table(names[:n-1], nil, xdplb.RingSize)
		moved, modMoved := 0, 0
		for s := range before {
			if names[before[s]] != names[:n-1][after[s]] {
				moved++
			}
			if s%n != s%(n-1) {
				modMoved++
			}
		}
		frac, modFrac := float64(moved)/float64(len(before)), float64(modMoved)/float64(len(before))
		t.Logf("n=%d: maglev moves %.3f of new flows (ideal %.3f), modulo %.3f", n, frac, 1/float64(n), modFrac)
		require.GreaterOrEqual(t, frac, 1/float64(n)-0.01, "n=%d: the removed backend's share must move", n)
		assert.Less(t, frac, 1/float64(n)+0.05, "n=%d: Maglev moved %.3f, want about 1/n", n, frac)
		assert.Greater(t, modFrac, frac, "n=%d: modulo should move more", n)
	}
}
