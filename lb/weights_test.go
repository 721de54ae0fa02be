package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestWeightedTables: in both modes a backend's share of the choice table
// is its share of the weights, to within 1% of the table; equal weights
// give the unweighted tables.
func TestWeightedTables(t *testing.T) {
	testutil.HostOnly(t, "the weighted tables are Go arithmetic; TestWeights proves the kernel follows them")
	const m = lbconf.TableSlots
	for _, ws := range [][]uint16{{3, 1, 1}, {5, 2, 1, 1}, {1, 1, 1}, {100, 1}} {
		var bs []backend
		var sum int
		for i, w := range ws {
			bs = append(bs, backend{id: uint32(i + 1), addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 2, byte(i + 1)}), 80), weight: w})
			sum += int(w)
		}
		for name, table := range map[string][]uint32{"maglev": maglevTable(bs, m), "random": weightedTable(bs, m)} {
			t.Run(fmt.Sprintf("%s/%v", name, ws), func(t *testing.T) {
				got := map[uint32]int{}
				for _, id := range table {
					got[id]++
				}
				for i, w := range ws {
					want := float64(m) * float64(w) / float64(sum)
					assert.InDelta(t, want, float64(got[uint32(i+1)]), m/100.0,
						"slots of backend %d (weight %d of %d)", i+1, w, sum)
				}
			})
		}
	}
}

// TestWeightsConfig: weights and source ranges in the configuration file,
// and what is refused.
func TestWeightsConfig(t *testing.T) {
	testutil.HostOnly(t, "configuration parsing and validation are Go")
	const good = `
cgroup = "edge"
reverse_size = 4096
[[service]]
vip = "198.18.1.1"
port = 80
mode = "maglev"
backends = ["198.18.2.1:8080@3", "198.18.2.2:8080"]
source_ranges = ["198.18.0.0/24", "0.0.0.0/32"]
`
	var c lbconf.Config
	_, err := toml.Decode(good, &c)
	require.NoError(t, err)
	svcs, err := c.Services()
	require.NoError(t, err)
	require.Len(t, svcs, 1)
	assert.Equal(t, []lbconf.Backend{{Addr: ap("198.18.2.1:8080"), Weight: 3}, {Addr: ap("198.18.2.2:8080"), Weight: 1}}, svcs[0].Backends)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("0.0.0.0/32")}, svcs[0].SourceRanges)

	for _, tc := range []struct {
		backends, ranges string
		want             string
	}{
		{`"198.18.2.1:80@0"`, ``, "want 1..65535"},
		{`"198.18.2.1:80@70000"`, ``, "want 1..65535"},
		{`"198.18.2.1:80@x"`, ``, "want 1..65535"},
		{`"198.18.2.1:80@1000", "198.18.2.2:80"`, ``, "fewer than 100"},
		{`"198.18.2.1:80"`, `"198.18.0.1/24"`, "did you mean 198.18.0.0/24"},
		{`"198.18.2.1:80"`, `"2001:db8::/32"`, "not of the VIP's family"},
		{`"198.18.2.1:80"`, `"198.18.0.0/24", "198.18.0.0/24"`, "duplicate source range"},
		{`"198.18.2.1:80"`, `"198.18.0.0"`, "source range"},
	} {
		doc := fmt.Sprintf("cgroup = \"edge\"\nreverse_size = 64\n[[service]]\nvip = \"198.18.1.1\"\nport = 80\nbackends = [%s]\nsource_ranges = [%s]\n", tc.backends, tc.ranges)
		var c lbconf.Config
		_, err := toml.Decode(doc, &c)
		require.NoError(t, err)
		_, err = c.Services()
		if assert.Error(t, err, "backends %s ranges %s", tc.backends, tc.ranges) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
}

// udpConnect makes a UDP socket in the client namespace, binds it to src
// when src is valid, connects it to dst and returns the socket (closed at
// cleanup) and connect's error.
func (e *env) udpConnect(t *testing.T, src netip.Addr, dst netip.AddrPort) (int, error) {
	t.Helper()
	var fd int
	var cerr error
	err := e.client.Do(func() error {
		af := unix.AF_INET
		if dst.Addr().Is6() {
			af = unix.AF_INET6
		}
		var err error
		if fd, err = unix.Socket(af, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if src.IsValid() {
			if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(src, 0))); err != nil {
				unix.Close(fd)
				return fmt.Errorf("bind %s: %w", src, err)
			}
		}
		cerr = unix.Connect(fd, sockaddr(dst))
		return nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd, cerr
}

func sockaddr(a netip.AddrPort) unix.Sockaddr {
	if a.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: a.Addr().As4(), Port: int(a.Port())}
	}
	return &unix.SockaddrInet6{Addr: a.Addr().As16(), Port: int(a.Port())}
}

// TestWeights: sockets spread over backends by weight in the kernel, in
// both modes (unbound UDP sockets: Maglev hashes their cookie, random
// mode too), chi-square against the weighted expectation.
func TestWeights(t *testing.T) {
	e := newEnv(t, 2)
	// Under TCG (the VM matrix) 100 sockets per mode still tell 3:1
	// from an unweighted 1:1 spread: chi-square 33 against 10.8.
	n := 1200
	switch {
	case testutil.InVM():
		n = 100
	case testing.Short():
		n = 400
	}
	bes := backendAddrs(false, 2)
	for _, mode := range []lbconf.Mode{lbconf.Maglev, lbconf.Random} {
		t.Run(string(mode), func(t *testing.T) {
			k := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
			require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: mode,
				Backends: []lbconf.Backend{{Addr: bes[0], Weight: 3}, {Addr: bes[1], Weight: 1}}}))
			defer e.lb.RemoveService(k)
			vip := netip.AddrPortFrom(k.VIP, k.Port)
			counts := map[netip.AddrPort]int{}
			for range n {
				fd, err := e.udpConnect(t, netip.Addr{}, vip)
				require.NoError(t, err)
				found := 0
				for _, b := range bes {
					got, ok, err := e.lb.Reverse(fd, b)
					require.NoError(t, err)
					if ok && got == vip {
						counts[b]++
						found++
					}
				}
				require.Equal(t, 1, found, "translations of one socket")
				unix.Close(fd)
			}
			exp := []float64{float64(n) * 3 / 4, float64(n) / 4}
			var x float64
			for i, b := range bes {
				d := float64(counts[b]) - exp[i]
				x += d * d / exp[i]
			}
			t.Logf("%s: %v for weights 3:1, chi-square %.2f", mode, counts, x)
			assert.Less(t, x, chiCritical001[1], "spread %v, want 3:1 (chi-square, p=0.001, 1 dof)", counts)
		})
	}
}

// TestSourceRanges: a socket whose source is outside the service's ranges
// is refused (the refusal errno), counted as denied, and nothing reaches
// the VIP; inside, it is balanced. An unbound socket is matched as the
// unspecified address.
func TestSourceRanges(t *testing.T) {
	e := newEnv(t, 1)
	require.NoError(t, e.client.AddAddr("c0", "198.18.0.2/24"))
	require.NoError(t, e.client.AddAddr("c0", "2001:db8::2/64"))
	for _, v6 := range []bool{false, true} {
		t.Run(family(v6), func(t *testing.T) {
			in, out := netip.MustParseAddr("198.18.0.2"), clientAddr4
			unspec := netip.MustParsePrefix("0.0.0.0/32")
			if v6 {
				in, out = netip.MustParseAddr("2001:db8::2"), clientAddr6
				unspec = netip.MustParsePrefix("::/128")
			}
			be := backendAddrs(v6, 1)
			k := lbconf.ServiceKey{VIP: vipOf(v6), Port: 80, Proto: lbconf.UDP}
			vip := netip.AddrPortFrom(k.VIP, k.Port)
			add := func(ranges ...netip.Prefix) {
				t.Helper()
				require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(be...), SourceRanges: ranges}))
			}
			translated := func(src netip.Addr) error {
				fd, err := e.udpConnect(t, src, vip)
				if err != nil {
					return err
				}
				got, ok, err := e.lb.Reverse(fd, be[0])
				if err != nil || !ok || got != vip {
					return fmt.Errorf("connected but not translated: %v %v %v", got, ok, err)
				}
				return nil
			}
			denied := func() uint64 {
				c, err := e.lb.Counters()
				require.NoError(t, err)
				return c.Services[k][Denied]
			}

			add(netip.PrefixFrom(in, in.BitLen()))
			assert.NoError(t, translated(in), "from %s, in the range", in)
			err := translated(out)
			assert.True(t, errors.Is(err, e.lb.Refusal()), "from %s, outside: %v, want %v", out, err, e.lb.Refusal())
			err = translated(netip.Addr{})
			assert.True(t, errors.Is(err, e.lb.Refusal()), "unbound: %v, want %v", err, e.lb.Refusal())
			assert.Equal(t, uint64(2), denied(), "denied")

			// TCP: refused at connect, and the decoy on the VIP hears
			// nothing.
			tk := lbconf.ServiceKey{VIP: vipOf(v6), Port: 81, Proto: lbconf.TCP}
			require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: tk, Mode: lbconf.Random, Backends: backends(be...), SourceRanges: []netip.Prefix{netip.PrefixFrom(in, in.BitLen())}}))
			_, err = e.ask1(netip.AddrPortFrom(tk.VIP, tk.Port), netip.AddrPortFrom(out, 0))
			assert.True(t, errors.Is(err, e.lb.Refusal()), "TCP from %s: %v, want %v", out, err, e.lb.Refusal())
			r, err := e.ask1(netip.AddrPortFrom(tk.VIP, tk.Port), netip.AddrPortFrom(in, 0))
			if assert.NoError(t, err) {
				assert.Equal(t, "B", r.kind, "TCP from %s reached %s", in, r.local)
			}
			require.NoError(t, e.lb.RemoveService(tk))

			// The unspecified address admits unbound sockets.
			require.NoError(t, e.lb.RemoveService(k))
			add(netip.PrefixFrom(in, in.BitLen()), unspec)
			assert.NoError(t, translated(netip.Addr{}), "unbound, with %s in the ranges", unspec)
			assert.True(t, errors.Is(translated(out), e.lb.Refusal()), "from %s, outside", out)

			// No ranges: everyone.
			require.NoError(t, e.lb.RemoveService(k))
			add()
			assert.NoError(t, translated(out), "no ranges, from %s", out)
			require.NoError(t, e.lb.RemoveService(k))
			var n int
			var rk [24]byte
			var rv uint8
			it := e.lb.objs.Ranges.Iterate()
			for it.Next(&rk, &rv) {
				n++
			}
			require.NoError(t, it.Err())
			assert.Zero(t, n, "source ranges left in the map after the services went")
		})
	}
}
