package lb

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func aps(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, ap(s))
	}
	return out
}

// mapState is everything the programs read, for "nothing changed" checks.
type mapState struct {
	Services map[bpf.LbSvcKey]bpf.LbSvc
	Backends map[uint32]bpf.LbBackend
	Tables   map[uint32]uint32 // service id -> inner map id
}

func readState(t *testing.T, l *LB) mapState {
	t.Helper()
	st := mapState{Services: map[bpf.LbSvcKey]bpf.LbSvc{}, Backends: map[uint32]bpf.LbBackend{}, Tables: map[uint32]uint32{}}
	var sk bpf.LbSvcKey
	var sv bpf.LbSvc
	it := l.objs.Services.Iterate()
	for it.Next(&sk, &sv) {
		st.Services[sk] = sv
	}
	var id uint32
	var be bpf.LbBackend
	it = l.objs.Backends.Iterate()
	for it.Next(&id, &be) {
		st.Backends[id] = be
	}
	// A table is swapped whole, never written in place: the inner map's id
	// names its contents.
	var innerID uint32
	it = l.objs.Tables.Iterate()
	for it.Next(&id, &innerID) {
		st.Tables[id] = innerID
	}
	return st
}

// TestValidation: every bad change is refused with an error naming the
// problem, and changes nothing: neither the service list nor the maps.
// manyBackends are n backend addresses 198.18.4.0:80 onwards.
func manyBackends(n int) []netip.AddrPort {
	var out []netip.AddrPort
	for i := range n {
		out = append(out, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(4 + i/256), byte(i)}), 80))
	}
	return out
}

func TestValidation(t *testing.T) {
	testutil.Root(t)
	l, err := Load(Options{ReverseSize: 1024})
	require.NoError(t, err)
	defer l.Close()
	require.False(t, l.TableSize() != lbconf.TableSlots, "TableSize() = %d, want TableSlots %d (MAX_TABLE in bpf/lb.c)", l.TableSize(), lbconf.TableSlots)
	web := lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.1"), Port: 80, Proto: lbconf.TCP}
	dns6 := lbconf.ServiceKey{VIP: netip.MustParseAddr("2001:db8:1::1"), Port: 53, Proto: lbconf.UDP}
	require.NoError(t, l.AddServices([]lbconf.Service{
		{ServiceKey: web, Mode: lbconf.Maglev, Backends: backends(aps("198.18.2.1:8080", "198.18.2.2:8080")...)},
		{ServiceKey: dns6, Mode: lbconf.Random, Backends: backends(aps("[2001:db8:2::1]:53")...)},
	}))
	unknown := lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.9"), Port: 80, Proto: lbconf.TCP}
	for _, tc := range []struct {
		name   string
		change func() error
		want   string
	}{
		{"unknown VIP", func() error { return l.AddBackends(unknown, aps("198.18.2.3:80")) }, "unknown service tcp/198.18.1.9:80"},
		{"unknown VIP drain", func() error { return l.DrainBackends(unknown, aps("198.18.2.1:8080")) }, "unknown service"},
		{"unknown VIP remove", func() error { return l.RemoveService(unknown) }, "unknown service"},
		{"duplicate backend in a new service", func() error {
			return l.AddService(lbconf.Service{ServiceKey: unknown, Mode: lbconf.Random, Backends: backends(aps("198.18.2.5:80", "198.18.2.5:80")...)})
		}, "duplicate backend 198.18.2.5:80"},
		{"duplicate backend added", func() error { return l.AddBackends(web, aps("198.18.2.3:8080", "198.18.2.1:8080")) }, "duplicate backend 198.18.2.1:8080"},
		{"backend given twice", func() error { return l.AddBackends(web, aps("198.18.2.3:8080", "198.18.2.3:8080")) }, "given twice"},
		{"VIP is a backend", func() error {
			return l.AddService(lbconf.Service{ServiceKey: lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.2.1"), Port: 443, Proto: lbconf.TCP}, Mode: lbconf.Random, Backends: backends(aps("198.18.3.1:443")...)})
		}, "VIP 198.18.2.1 is a backend address of service tcp/198.18.1.1:80"},
		{"backend is a VIP", func() error { return l.AddBackends(web, aps("198.18.2.3:8080", "198.18.1.1:8080")) }, "VIP 198.18.1.1 is a backend address"},
		{"zero backends", func() error { return l.AddService(lbconf.Service{ServiceKey: unknown, Mode: lbconf.Random}) }, "zero backends"},
		{"remove every backend", func() error { return l.RemoveBackends(dns6, aps("[2001:db8:2::1]:53")) }, "zero backends"},
		{"VIP port 0", func() error {
			return l.AddService(lbconf.Service{ServiceKey: lbconf.ServiceKey{VIP: unknown.VIP, Port: 0, Proto: lbconf.TCP}, Mode: lbconf.Random, Backends: backends(aps("198.18.2.5:80")...)})
		}, "port 0 is not a port"},
		{"backend port 0", func() error { return l.AddBackends(web, aps("198.18.2.3:8080", "198.18.2.4:0")) }, "backend 198.18.2.4:0: port 0"},
		{"family mismatch", func() error { return l.AddBackends(web, aps("[2001:db8:2::9]:80")) }, "not of the VIP's family"},
		{"unknown protocol", func() error {
			return l.AddService(lbconf.Service{ServiceKey: lbconf.ServiceKey{VIP: unknown.VIP, Port: 80, Proto: "sctp"}, Mode: lbconf.Random, Backends: backends(aps("198.18.2.5:80")...)})
		}, `unknown protocol "sctp"`},
		{"unknown mode", func() error {
			return l.AddService(lbconf.Service{ServiceKey: unknown, Mode: "round-robin", Backends: backends(aps("198.18.2.5:80")...)})
		}, `unknown mode "round-robin"`},
		{"existing service", func() error {
			return l.AddService(lbconf.Service{ServiceKey: web, Mode: lbconf.Random, Backends: backends(aps("198.18.2.9:80")...)})
		}, "already exists"},
		{"drain an unknown backend", func() error { return l.DrainBackends(web, aps("198.18.2.1:8080", "198.18.2.7:8080")) }, "no backend 198.18.2.7:8080"},
		// Issue 25, finding 4: before, 20,003 backends were accepted and
		// only 16,381 could ever be chosen.
		{"more backends than the table tells apart", func() error {
			return l.AddService(lbconf.Service{ServiceKey: unknown, Mode: lbconf.Maglev, Backends: backends(manyBackends(lbconf.MaxServiceBackends + 1)...)})
		}, "164 backends, more than the 163 a choice table of 16381 slots tells apart"},
		{"added past the table", func() error { return l.AddBackends(web, manyBackends(lbconf.MaxServiceBackends-1)) },
			"164 backends, more than the 163"},
		{"one good service, one bad", func() error {
			return l.AddServices([]lbconf.Service{
				{ServiceKey: unknown, Mode: lbconf.Random, Backends: backends(aps("198.18.2.5:80")...)},
				{ServiceKey: lbconf.ServiceKey{VIP: unknown.VIP, Port: 81, Proto: lbconf.TCP}, Mode: lbconf.Random},
			})
		}, "zero backends"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svcs, maps := l.Services(), readState(t, l)
			err := tc.change()
			require.False(t, err == nil || !strings.Contains(err.Error(), tc.want), "error = %v, want one containing %q", err, tc.want)
			if got := l.Services(); !reflect.DeepEqual(got, svcs) {
				assert.Fail(t, fmt.Sprintf("services changed by a refused change:\n got %+v\nwant %+v", got, svcs))
			}
			if got := readState(t, l); !reflect.DeepEqual(got, maps) {
				assert.Fail(t, "maps changed by a refused change")
			}
		})
	}

	// As many backends as fit: accepted.
	require.NoError(t, l.AddService(lbconf.Service{ServiceKey: unknown, Mode: lbconf.Maglev, Backends: backends(manyBackends(lbconf.MaxServiceBackends)...)}),
		"%d backends, want accepted", lbconf.MaxServiceBackends)
	require.NoError(t, l.RemoveService(unknown))

	// And the good changes do what they say, in the maps too.
	before := readState(t, l)
	require.NoError(t, l.AddBackends(web, aps("198.18.2.3:8080")))
	after := readState(t, l)
	assert.False(t, len(after.Backends) != len(before.Backends)+1, "backends map holds %d, want %d", len(after.Backends), len(before.Backends)+1)
	require.NoError(t, l.DrainBackends(dns6, aps("[2001:db8:2::1]:53")))
	s, _ := l.Service(dns6)
	assert.True(t, s.Backends[0].Draining, "Service(%s) = %+v, want its backend draining", dns6, s)
	if st := readState(t, l); len(st.Tables) != 1 {
		assert.Fail(t, fmt.Sprintf("%d tables with the only backend of %s draining, want 1 (web's)", len(st.Tables), dns6))
	}
	require.NoError(t, l.RemoveService(dns6))
	if st := readState(t, l); len(st.Services) != 1 || len(st.Backends) != 3 {
		assert.Fail(t, fmt.Sprintf("after removing %s: %d services, %d backends in the maps, want 1 and 3", dns6, len(st.Services), len(st.Backends)))
	}
}
