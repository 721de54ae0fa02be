package datapath

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	shsource "github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/sim"
)

// TestForgedFlood: a flood of 10x the table size of forged sources, with an
// established heavy source sending throughout. The flood must not evict the
// heavy source's bucket (it keeps its counts and never gets a fresh burst),
// and no more strangers get in than the admission bucket allows: exactly
// what the admission bucket held when the flood began plus
// floor(duration * admission rate). The table holds each of them but those
// a set could not (more than Ways in one set: the keyed hash decides).
func TestForgedFlood(t *testing.T) {
	const table = 1024
	l := config.Limits{Rate: 100, Burst: 100, AdmissionRate: 50, AdmissionBurst: 20}
	s := load(t, table, l)
	heavy := sim.From("198.18.0.1", sim.UDP).Bytes()
	udp, tcp := counter.ProtoUDP, counter.ProtoTCP
	t0 := 10 * sec

	// Established: admitted (one admission token) and drained.
	sim.Scenario{Name: t.Name() + "/establish", Target: Target(s), Steps: []sim.Step{
		{Name: "burst", At: t0, Frame: heavy, Times: int(l.Burst), Want: sim.Pass, Delta: N(l.Burst, pass, counter.ReasonOK, udp)},
		{Name: "drained", At: t0, Frame: heavy, Times: 10, Want: sim.Drop, Delta: N(10, drop, counter.ReasonLimit, udp)},
	}}.Run(t)

	// The flood: 10 x table forged sources over 2 s, one heavy packet after
	// every 8 forged ones. Both arrive faster than their rates, so the
	// closed form of TestRefillAtRate gives every verdict.
	const forged = 10 * table
	const span = 2 * time.Second
	gap := span / forged
	admBudget := l.AdmissionBurst - 1 // the heavy source took one
	// Each frame's verdict is a step; the counters are compared once over
	// the whole flood (11,520 reads of them took 30-50 s per kernel in
	// the VM matrix, where 5.10 reads a per-CPU array a key at a time).
	var steps []sim.Step
	var admitted, heavyPassed, heavySent uint64
	var admittedAddrs []netip.Addr
	counts := map[string]uint64{}
	add := func(d map[string]uint64) {
		for k, v := range d {
			counts[k] += v
		}
	}
	for i := range forged {
		at := t0 + time.Duration(i)*gap
		a := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}) // 10,240 forged: fits 198.19.0.0/16
		f := sim.From(a.String(), sim.TCP).Bytes()
		st := sim.Step{Name: fmt.Sprintf("forged %s", a), At: at, Frame: f}
		if admitted < admBudget+uint64(at-t0)*l.AdmissionRate/uint64(sec) {
			admitted++
			admittedAddrs = append(admittedAddrs, a)
			st.Want = sim.Pass
			add(One(pass, counter.ReasonOK, tcp))
		} else {
			st.Want = sim.Drop
			add(One(drop, counter.ReasonAdmission, tcp))
		}
		steps = append(steps, st)
		if i%8 == 7 {
			heavySent++
			st := sim.Step{Name: "heavy", At: at, Frame: heavy}
			if heavyPassed < uint64(at-t0)*l.Rate/uint64(sec) {
				heavyPassed++
				st.Want = sim.Pass
				add(One(pass, counter.ReasonOK, udp))
			} else {
				st.Want = sim.Drop
				add(One(drop, counter.ReasonLimit, udp))
			}
			steps = append(steps, st)
		}
	}
	target := Target(s)
	before, err := target.Counters()
	require.NoError(t, err)
	sim.Scenario{Name: t.Name() + "/flood", Target: target, Steps: steps}.Run(t)
	after, err := target.Counters()
	require.NoError(t, err)
	d := sim.DiffCounts(counts, sim.Delta(before, after))
	assert.Empty(t, d, "counters over the flood differ (-want +got):\n%s", d)

	allowed := l.AdmissionBurst + uint64(span)*l.AdmissionRate/uint64(sec)
	assert.LessOrEqual(t, admitted, allowed, "strangers admitted during the flood")
	// Each admitted source was inserted; a set that drew more than
	// Ways of them holds Ways (the heavy source, busy, is never replaced).
	perSet := map[uint32]int{s.SetOf(netip.MustParseAddr("198.18.0.1")): 1}
	for _, a := range admittedAddrs {
		perSet[s.SetOf(a)]++
	}
	held := 0
	for _, k := range perSet {
		held += min(k, shsource.Ways)
	}
	n, err := s.CountSources(context.Background())
	require.NoError(t, err)
	assert.Equal(t, held, n, "CountSources() after the flood (%d admitted, one heavy)", admitted)
	assert.Less(t, n, table, "the flood must not fill the table")

	got := source(t, s, "198.18.0.1")
	want := shsource.Source{Addr: got.Addr, Prefix: netip.MustParsePrefix("198.18.0.1/32"), Passed: l.Burst + heavyPassed, Dropped: 10 + heavySent - heavyPassed, Limited: true}
	assert.Equal(t, want, got, "Source(heavy): its bucket must survive the flood")
}
