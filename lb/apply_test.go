package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// tableContents is every service's choice table, by service id.
func tableContents(t *testing.T, l *LB) map[uint32][]uint32 {
	t.Helper()
	out := map[uint32][]uint32{}
	var id, innerID uint32
	it := l.objs.Tables.Iterate()
	for it.Next(&id, &innerID) {
		m, err := ebpf.NewMapFromID(ebpf.MapID(innerID))
		require.NoError(t, err)
		slots := make([]uint32, m.MaxEntries())
		for i := range slots {
			require.NoError(t, m.Lookup(uint32(i), &slots[i]))
		}
		m.Close()
		out[id] = slots
	}
	require.NoError(t, it.Err())
	return out
}

// TestApplyFailure (issue 25, finding 6): a valid change whose map write
// fails is an *ApplyError (the API's 500, not the request's 400), and
// the maps are as before it, whichever write failed. Before, it was a
// plain error the API answered 400, and the writes before the failing
// one stayed.
func TestApplyFailure(t *testing.T) {
	testutil.Root(t)
	testutil.HostOnly(t, "the rollback of a failed write is Go logic; every kernel's map writes are proven by the other lb tests")
	l, err := Load(Options{ReverseSize: 1024})
	require.NoError(t, err)
	defer l.Close()
	web := lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.1"), Port: 80, Proto: lbconf.TCP}
	dns := lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.2"), Port: 53, Proto: lbconf.UDP}
	require.NoError(t, l.AddServices([]lbconf.Service{
		{ServiceKey: web, Mode: lbconf.Maglev, Backends: backends(aps("198.18.2.1:8080", "198.18.2.2:8080")...)},
		{ServiceKey: dns, Mode: lbconf.Random, Backends: backends(aps("198.18.3.1:53")...)},
	}))
	newSvc := lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.3"), Port: 443, Proto: lbconf.TCP}
	changes := []struct {
		name string
		do   func() error
	}{
		{"add backends", func() error { return l.AddBackends(web, aps("198.18.2.3:8080")) }},
		{"drain", func() error { return l.DrainBackends(web, aps("198.18.2.1:8080")) }},
		{"remove backends", func() error { return l.RemoveBackends(web, aps("198.18.2.2:8080")) }},
		{"add a service", func() error {
			return l.AddService(lbconf.Service{ServiceKey: newSvc, Mode: lbconf.Random, Backends: backends(aps("198.18.4.1:443")...)})
		}},
		{"set mode", func() error { return l.SetMode(dns, lbconf.Maglev) }},
		{"remove a service", func() error { return l.RemoveService(dns) }},
	}
	failures := 0
	for _, c := range changes {
		// Fail the first write, then the second, ... until the change
		// needs fewer writes than that.
		for nth := 1; ; nth++ {
			svcs, maps, tables := l.Services(), readState(t, l), tableContents(t, l)
			n := 0
			var failed string
			l.writeFault = func(what string) error {
				n++
				if n == nth {
					failed = what
					return fmt.Errorf("injected failure of write %d (%s)", nth, what)
				}
				return nil
			}
			err := c.do()
			l.writeFault = nil
			if failed == "" {
				// Every write passed: the change is done, and the next
				// change starts from it.
				require.NoError(t, err, "%s with no failure", c.name)
				break
			}
			failures++
			var ae *ApplyError
			assert.False(t, !errors.As(err, &ae) || !ae.Restored, "%s, write %d (%s) failing: error %v, want a restored *ApplyError", c.name, nth, failed, err)
			if got := l.Services(); !reflect.DeepEqual(got, svcs) {
				assert.Fail(t, fmt.Sprintf("%s, write %d (%s) failing: services %+v, want %+v", c.name, nth, failed, got, svcs))
			}
			got := readState(t, l)
			got.Tables, maps.Tables = nil, nil // inner maps are new: compare contents
			assert.True(t, reflect.DeepEqual(got, maps), "%s, write %d (%s) failing: maps half-changed:\n got %+v\nwant %+v", c.name, nth, failed, got, maps)
			if got := tableContents(t, l); !reflect.DeepEqual(got, tables) {
				assert.Fail(t, fmt.Sprintf("%s, write %d (%s) failing: choice tables differ from before", c.name, nth, failed))
			}
		}
	}
	assert.False(t, failures < len(changes), "%d failures injected over %d changes, want at least one each", failures, len(changes))
}
