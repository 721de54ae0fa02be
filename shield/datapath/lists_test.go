package datapath

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// TestListsNested: allow beats deny at any prefix length, in both nestings,
// and removing the covering allow prefix exposes the deny prefix inside it.
func TestListsNested(t *testing.T) {
	s := load(t, 4096, config.Limits{Rate: 1e6, Burst: 1e6, AdmissionRate: 1e6, AdmissionBurst: 1e6})
	addList(t, s, lists.AllowList, "198.18.0.0/15", "2001:db8:1:2::/64")
	addList(t, s, lists.DenyList, "198.18.1.0/24", "198.18.1.7/32", "2001:db8::/32")
	udp := counter.ProtoUDP
	step := func(name, src string, want sim.Action, r counter.Reason) sim.Step {
		v := pass
		if want == sim.Drop {
			v = drop
		}
		return sim.Step{Name: name, Frame: sim.From(src, sim.UDP).Bytes(), Want: want, Delta: One(v, r, udp)}
	}
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		step("deny /24 inside allow /15", "198.18.1.1", sim.Pass, counter.ReasonAllow),
		step("deny /32 inside deny /24 inside allow /15", "198.18.1.7", sim.Pass, counter.ReasonAllow),
		step("allow /64 inside deny /32", "2001:db8:1:2::9", sim.Pass, counter.ReasonAllow),
		step("deny /32 outside the allow /64", "2001:db8:1:3::9", sim.Drop, counter.ReasonDeny),
		step("unlisted", "203.0.113.1", sim.Pass, counter.ReasonOK),
	}}.Run(t)

	ps, err := lists.ParsePrefixes([]string{"198.18.0.0/15"})
	require.NoError(t, err)
	require.NoError(t, second(s.Remove(lists.AllowList, ps)))
	sim.Scenario{Name: t.Name() + "/allow removed", Target: Target(s), Steps: []sim.Step{
		step("deny /24 now applies", "198.18.1.1", sim.Drop, counter.ReasonDeny),
		step("deny /32 now applies", "198.18.1.7", sim.Drop, counter.ReasonDeny),
		step("no longer listed", "198.18.2.1", sim.Pass, counter.ReasonOK),
	}}.Run(t)
}

// TestListsModel applies random adds and removes to both lists and after
// every change checks the program's verdict on addresses around every
// listed prefix against the definition: allowed if any allow prefix
// contains the address, else denied if any deny prefix does, else neither.
func TestListsModel(t *testing.T) {
	s := load(t, 65536, config.Limits{Rate: 1e6, Burst: 1e6, AdmissionRate: 1e6, AdmissionBurst: 1e6})
	rng := rand.New(rand.NewPCG(2, 7))
	listed := map[lists.List]map[netip.Prefix]bool{lists.AllowList: {}, lists.DenyList: {}}
	randPrefix := func() netip.Prefix {
		if rng.IntN(3) == 0 {
			a := [16]byte{0x20, 0x01, 0x0d, 0xb8, byte(rng.IntN(4)), byte(rng.IntN(4)), 0, byte(rng.IntN(2))}
			return netip.PrefixFrom(netip.AddrFrom16(a), []int{24, 32, 40, 48, 64, 128}[rng.IntN(6)]).Masked()
		}
		a := [4]byte{198, 18 + byte(rng.IntN(2)), byte(rng.IntN(4)), byte(rng.IntN(8))}
		return netip.PrefixFrom(netip.AddrFrom4(a), []int{8, 15, 16, 22, 24, 30, 32}[rng.IntN(7)]).Masked()
	}
	model := func(a netip.Addr) counter.Reason {
		for p := range listed[lists.AllowList] {
			if p.Contains(a) {
				return counter.ReasonAllow
			}
		}
		for p := range listed[lists.DenyList] {
			if p.Contains(a) {
				return counter.ReasonDeny
			}
		}
		return counter.ReasonOK
	}
	checks := 0
	for op := range 60 {
		l := lists.List(rng.IntN(2))
		p := randPrefix()
		if listed[l][p] && rng.IntN(2) == 0 {
			require.NoError(t, second(s.Remove(l, []netip.Prefix{p})), "op %d: Remove(%s, %s)", op, l, p)
			delete(listed[l], p)
		} else {
			require.NoError(t, second(s.Add(l, []netip.Prefix{p})), "op %d: Add(%s, %s)", op, l, p)
			listed[l][p] = true
		}
		// Probe the first and last address of every listed prefix and
		// their neighbours.
		var probes []netip.Addr
		for _, set := range listed {
			for q := range set {
				first := q.Addr()
				last := lastAddr(q)
				probes = append(probes, first, last, first.Prev(), last.Next())
			}
		}
		var steps []sim.Step
		for _, a := range probes {
			if !a.IsValid() {
				continue
			}
			r := model(a)
			want, v := sim.Pass, pass
			if r == counter.ReasonDeny {
				want, v = sim.Drop, drop
			}
			steps = append(steps, sim.Step{Name: fmt.Sprintf("op %d: %s", op, a), Frame: sim.From(a.String(), sim.UDP).Bytes(), Want: want, Delta: One(v, r, counter.ProtoUDP)})
		}
		if len(steps) == 0 {
			continue
		}
		res := sim.Scenario{Name: fmt.Sprintf("%s/op-%d", t.Name(), op), Target: Target(s), Steps: steps}.Run(t)
		checks += res.Steps
		require.False(t, t.Failed(), "after op %d: allow %v, deny %v", op, keys(listed[lists.AllowList]), keys(listed[lists.DenyList]))
	}
	t.Logf("%d verdicts checked against the model", checks)
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func keys(m map[netip.Prefix]bool) []netip.Prefix {
	var out []netip.Prefix
	for p := range m {
		out = append(out, p)
	}
	return out
}

// TestListsKnownSources: every list change takes effect at once for
// sources the table knows, in both directions (the region bitmaps follow
// the tries: a region whose bit was left set costs a lookup, one left clear
// would miss a listed source), and a prefix longer than the source key (an
// IPv6 /128 inside a /64 source) is never judged for its whole key.
func TestListsKnownSources(t *testing.T) {
	s := load(t, 4096, config.Limits{Rate: 1e6, Burst: 1e6, AdmissionRate: 1e6, AdmissionBurst: 1e6})
	udp := counter.ProtoUDP
	step := func(name, src string, want sim.Action, r counter.Reason) sim.Step {
		v := pass
		if want == sim.Drop {
			v = drop
		}
		return sim.Step{Name: name, Frame: sim.From(src, sim.UDP).Bytes(), Want: want, Delta: One(v, r, udp)}
	}
	change := func(add bool, l lists.List, cidrs ...string) {
		t.Helper()
		ps, err := lists.ParsePrefixes(cidrs)
		require.NoError(t, err)
		if add {
			require.NoError(t, second(s.Add(l, ps)), "Add(%s, %q)", l, cidrs)
		} else {
			require.NoError(t, second(s.Remove(l, ps)), "Remove(%s, %q)", l, cidrs)
		}
	}
	// Non-empty lists from the start, in other regions.
	change(true, lists.DenyList, "203.0.113.0/24", "2001:db8:ffff::/48")
	run := func(name string, steps ...sim.Step) {
		t.Helper()
		sim.Scenario{Name: t.Name() + "/" + name, Target: Target(s), Steps: steps}.Run(t)
	}
	run("known", step("v4 admitted", "198.18.0.1", sim.Pass, counter.ReasonOK), step("v4 known", "198.18.0.1", sim.Pass, counter.ReasonOK),
		step("v6 admitted", "2001:db8:1:2::1", sim.Pass, counter.ReasonOK), step("v6 known", "2001:db8:1:2::1", sim.Pass, counter.ReasonOK))
	change(true, lists.DenyList, "198.18.0.0/24", "2001:db8:1::/48")
	run("denied", step("v4", "198.18.0.1", sim.Drop, counter.ReasonDeny), step("v6", "2001:db8:1:2::1", sim.Drop, counter.ReasonDeny))
	change(true, lists.AllowList, "198.18.0.1/32", "2001:db8:1:2::/64")
	run("allowed inside the denied", step("v4", "198.18.0.1", sim.Pass, counter.ReasonAllow), step("v6", "2001:db8:1:2::1", sim.Pass, counter.ReasonAllow))
	change(false, lists.AllowList, "198.18.0.1/32", "2001:db8:1:2::/64")
	change(false, lists.DenyList, "198.18.0.0/24", "2001:db8:1::/48")
	run("unlisted again", step("v4", "198.18.0.1", sim.Pass, counter.ReasonOK), step("v6", "2001:db8:1:2::1", sim.Pass, counter.ReasonOK))
	// One address of the v6 source's /64 allowed: the rest of the /64
	// keeps its bucket, whichever address came first.
	change(true, lists.AllowList, "2001:db8:1:2::7/128")
	run("host inside a key", step("listed host", "2001:db8:1:2::7", sim.Pass, counter.ReasonAllow),
		step("its neighbour", "2001:db8:1:2::1", sim.Pass, counter.ReasonOK), step("listed host again", "2001:db8:1:2::7", sim.Pass, counter.ReasonAllow))
	src := source(t, s, "198.18.0.1")
	require.Equal(t, uint64(3), src.Passed, "Source(198.18.0.1).Passed: its ok packets only")
}
