package lb

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestHealth: a backend that refuses probes (TCP: RST; UDP: ICMP port
// unreachable) is quarantined by itself after Fails probes, no new socket
// chooses it, and it comes back by itself after Passes once it answers;
// the probes are counted per backend in the metrics.
func TestHealth(t *testing.T) {
	e := newEnv(t, 3)
	live := backendAddrs(false, 2)
	dead := netip.AddrPortFrom(backendAddrs(false, 3)[2].Addr(), 9090) // its address exists; nothing listens
	bes := append(append([]netip.AddrPort{}, live...), dead)
	// Under TCG (-short in the VM matrix, ~20x slower) a live backend's
	// answer can take longer than 100 ms: the 5.10 run quarantined live
	// backends with it.
	step := 100 * time.Millisecond
	if testing.Short() {
		step = 2 * time.Second
	}
	hc := &lbconf.HealthCheck{Interval: step, Timeout: step, Fails: 2, Passes: 2}
	if testutil.InVM() {
		// One passing probe restores: an interval less per service
		// under TCG; counting passes is Go, proven on the host.
		hc.Passes = 1
	}
	tcp := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP}
	udp := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
	uhc := *hc
	uhc.Request = []byte("?\n")
	require.NoError(t, e.lb.AddServices([]lbconf.Service{
		{ServiceKey: tcp, Mode: lbconf.Random, Backends: backends(bes...), Health: hc},
		{ServiceKey: udp, Mode: lbconf.Maglev, Backends: backends(bes...), Health: &uhc},
	}))

	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := e.client.Do(func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.lb.RunHealth(ctx, dial) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	state := func(k lbconf.ServiceKey, a netip.AddrPort) string {
		s, _ := e.lb.Service(k)
		for _, b := range s.Backends {
			if b.Addr == a {
				switch {
				case b.Draining:
					return "draining"
				case b.Quarantined:
					return "quarantined"
				}
				return "active"
			}
		}
		return "gone"
	}
	wait := 5 * time.Second
	if testing.Short() {
		wait = 60 * time.Second // TCG
	}
	for _, k := range []lbconf.ServiceKey{tcp, udp} {
		require.Eventually(t, func() bool { return state(k, dead) == "quarantined" }, wait, 20*time.Millisecond, "%s: %s not quarantined", k, dead)
		for _, a := range live {
			assert.Equal(t, "active", state(k, a), "%s: %s", k, a)
		}
	}

	// No new socket chooses it.
	vip := netip.AddrPortFrom(udp.VIP, udp.Port)
	for range 30 {
		fd, err := e.udpConnect(t, netip.Addr{}, vip)
		require.NoError(t, err)
		_, ok, err := e.lb.Reverse(fd, dead)
		require.NoError(t, err)
		require.False(t, ok, "a new socket chose the quarantined %s", dead)
	}
	for range 10 {
		r, err := e.ask1(netip.AddrPortFrom(tcp.VIP, tcp.Port), netip.AddrPort{})
		require.NoError(t, err)
		require.NotEqual(t, dead, r.local)
	}

	// Counted per backend, in the metrics too.
	p := e.lb.Probes(tcp)
	assert.GreaterOrEqual(t, p[dead].Failed, uint64(2), "failed probes of %s", dead)
	assert.Positive(t, p[live[0]].OK, "ok probes of %s", live[0])
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.lb.Collector())
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var series int
	for _, mf := range mfs {
		if mf.GetName() == "shield_lb_backend_probes_total" {
			series = len(mf.GetMetric())
		}
	}
	assert.Equal(t, 2*3*2, series, "probe series: 2 services x 3 backends x 2 results")

	// It answers again: back by itself.
	e.serve(t, "B", dead)
	for _, k := range []lbconf.ServiceKey{tcp, udp} {
		require.Eventually(t, func() bool { return state(k, dead) == "active" }, wait, 20*time.Millisecond, "%s: %s not restored", k, dead)
	}
}

// TestHealthConfig: the probes stay bounded; a UDP check needs a request.
func TestHealthConfig(t *testing.T) {
	testutil.HostOnly(t, "configuration validation and the panic threshold are Go")
	for _, tc := range []struct {
		proto  string
		health lbconf.HealthConfig
		want   string
	}{
		{"tcp", lbconf.HealthConfig{Interval: "10ms"}, "health interval 10ms out of range"},
		{"tcp", lbconf.HealthConfig{Interval: "2h"}, "out of range"},
		{"tcp", lbconf.HealthConfig{Interval: "1s", Timeout: "2s"}, "health timeout 2s out of range"},
		{"tcp", lbconf.HealthConfig{Fails: 1000}, "want 1..100"},
		{"udp", lbconf.HealthConfig{}, "needs a request"},
		{"tcp", lbconf.HealthConfig{UDPRequest: "x"}, "udp_request on a TCP service"},
		{"tcp", lbconf.HealthConfig{Interval: "soon"}, "health.interval"},
	} {
		c := lbconf.Config{Cgroup: "edge", ReverseSize: 64, Service: []lbconf.ServiceConfig{{VIP: "198.18.1.1", Port: 80, Protocol: tc.proto,
			Backends: []string{"198.18.2.1:80"}, Health: &tc.health}}}
		_, err := c.Services()
		if assert.Error(t, err, "%+v", tc.health) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
	c := lbconf.Config{Cgroup: "edge", ReverseSize: 64, Service: []lbconf.ServiceConfig{{VIP: "198.18.1.1", Port: 53, Protocol: "udp",
		Backends: []string{"198.18.2.1:53"}, Health: &lbconf.HealthConfig{UDPRequest: "ping"}}}}
	svcs, err := c.Services()
	require.NoError(t, err)
	want := lbconf.DefaultHealthCheck()
	want.Request = []byte("ping")
	assert.Equal(t, &want, svcs[0].Health)

	// Every backend quarantined: all of them stay in the table rather
	// than none (panic threshold).
	s := &service{backends: []backend{{id: 1, quarantined: true}, {id: 2, quarantined: true}, {id: 3, draining: true}}}
	assert.Len(t, s.active(), 2)
}
