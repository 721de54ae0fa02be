package datapath

import (
	"flag"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	shsource "github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/sim"
)

// compat runs every test of the package against shield_compat, whatever
// the kernel (the regression gate's second behaviour run: `-datapath.compat`).
var compat = flag.Bool("datapath.compat", false, "load shield_compat in shield's place on every kernel")

// Shorthands for counter keys.
const (
	pass = counter.Pass
	drop = counter.Drop
)

// load gives t a shield with the virtual clock (time 0) and limits l, as
// Load leaves it, for t alone until t ends. A shield of the same table
// size a finished test gave back is Reset instead of loaded again: a load
// is verified anew, which in a VM under TCG costs 1-4 s, a Reset
// milliseconds (TestResetIsLoad in package shield shows the two alike).
func load(t testing.TB, tableSize uint32, l config.Limits) *shield.Shield {
	t.Helper()
	testutil.Root(t)
	s, ok := idle.Take(tableSize)
	if ok {
		if err := s.Reset(l); err != nil {
			s.Close()
			require.NoError(t, err, "Reset(%+v)", l)
		}
	} else {
		var err error
		s, err = shield.Load(shield.Options{Compat: *compat, TableSize: tableSize, Clock: config.ClockVirtual, Limits: l})
		require.NoError(t, err, "shield.Load()")
	}
	t.Cleanup(func() { idle.Give(tableSize, s) })
	return s
}

// idle holds the shields finished tests gave back, by table size.
var idle testutil.Pool[uint32, *shield.Shield]

// addList puts CIDRs on list l.
func addList(t testing.TB, s *shield.Shield, l lists.List, cidrs ...string) {
	t.Helper()
	ps, err := lists.ParsePrefixes(cidrs)
	require.NoError(t, err, "ParsePrefixes(%q)", cidrs)
	require.NoError(t, second(s.Add(l, ps)), "Add(%s, %q)", l, cidrs)
}

// source reads one source's entry, failing t when it is not tracked.
func source(t testing.TB, s *shield.Shield, addr string) shsource.Source {
	t.Helper()
	src, ok, err := s.Source(netip.MustParseAddr(addr))
	require.NoError(t, err, "Source(%s)", addr)
	require.True(t, ok, "Source(%s): not tracked", addr)
	return src
}

// protoOf maps a built frame's L4 to the counter protocol.
func protoOf(l sim.L4) counter.Proto {
	switch l {
	case sim.TCP:
		return counter.ProtoTCP
	case sim.UDP:
		return counter.ProtoUDP
	default:
		return counter.ProtoICMP
	}
}

func netipAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// setOwn makes addrs the machine's own addresses, as the service does.
func setOwn(t testing.TB, s *shield.Shield, addrs ...string) {
	t.Helper()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	_, _, err := s.SetOwn(as)
	require.NoError(t, err, "SetOwn(%q)", addrs)
}

// second drops a call's first result, for checking its error.
func second[T any](_ T, err error) error { return err }
