package nft_test

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/nft"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
)

func TestRenderValidates(t *testing.T) {
	good := nft.Config{Ifaces: []string{"eth0"}, TableSize: 1024, Limits: config.DefaultLimits()}
	for _, tc := range []struct {
		name string
		mod  func(*nft.Config)
		want string // "" : no error
	}{
		{"good", func(*nft.Config) {}, ""},
		{"no iface", func(c *nft.Config) { c.Ifaces = nil }, "no interface"},
		{"quote in iface", func(c *nft.Config) { c.Ifaces = []string{`a"b`} }, "quote"},
		{"bad table", func(c *nft.Config) { c.Table = "x y" }, "table"},
		{"zero rate", func(c *nft.Config) { c.Limits.Rate = 0 }, "rate"},
		{"zero size", func(c *nft.Config) { c.TableSize = 0 }, "table size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			_, err := nft.Render(c)
			if tc.want == "" {
				require.NoError(t, err, "Render(%+v)", c)
			} else {
				require.ErrorContains(t, err, tc.want, "Render(%+v)", c)
			}
		})
	}
}

func TestRenderClassesAndKeys(t *testing.T) {
	c := nft.Config{Ifaces: []string{"eth0", "eth1"}, TableSize: 1024, Limits: config.DefaultLimits(),
		Protected: []nft.Destination{{Proto: "tcp", Port: 443}, {Proto: "udp", Port: 53, Addr: netip.MustParseAddr("2001:db8::1")},
			{Proto: "tcp", Port: 8443, Addr: netip.MustParseAddr("198.18.0.1")}, {Proto: "icmp"}},
		Unprotected: nft.Class{Rate: 250000, Burst: 250000, AdmissionRate: 10000, AdmissionBurst: 10000},
		KeyPrefix4:  24, KeyPrefix6: 64,
		Own: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/32")}}
	s, err := nft.Render(c)
	require.NoError(t, err)
	for _, want := range []string{
		`devices = { "eth0", "eth1" }`,
		"elements = { tcp . 443 }",
		"elements = { 198.18.0.1 . tcp . 8443 }",
		"elements = { 2001:db8::1 . udp . 53 }",
		"meta l4proto { icmp, ipv6-icmp } jump sources",
		"udp dport 32768-60999 jump unprotected",
		"tcp flags & (syn | ack) != syn tcp dport 32768-60999 jump unprotected",
		"meta protocol { ip, ip6 } jump sources",
		"update @sources4 { ip saddr & 255.255.255.0 limit rate over 1000/second burst 2000 packets }",
		"update @sources6 { ip6 saddr & ffff:ffff:ffff:ffff:: limit rate over 1000/second burst 2000 packets }",
		"update @unprotected4 { ip saddr & 255.255.255.0 limit rate over 250000/second burst 250000 packets }",
		"ip saddr & 255.255.255.0 != @sources4 ip saddr & 255.255.255.0 != @unprotected4 limit name \"admission\"",
		"limit admission_unprotected { rate over 10000/second burst 10000 packets }",
		`ip saddr @own4 counter name "c_spoofed" drop`,
		`ip6 saddr ::ffff:0.0.0.0/96 counter name "c_spoofed" drop`,
	} {
		assert.Contains(t, s, want, "Render lacks %q", want)
	}
	c.Unprotected = nft.Class{}
	_, err = nft.Render(c)
	assert.ErrorContains(t, err, "unprotected", "Render with protected destinations and no unprotected limits")
}

func TestRenderDryRun(t *testing.T) {
	c := nft.Config{Ifaces: []string{"eth0"}, TableSize: 1024, Limits: config.DefaultLimits(),
		Deny: []netip.Prefix{netip.MustParsePrefix("198.18.3.0/24")}}
	c.Limits.DryRun = true
	s, err := nft.Render(c)
	require.NoError(t, err)
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, `"c_limit"`) || strings.Contains(line, `"c_admission"`) {
			assert.NotContains(t, line, "drop", "dry run: %q drops", strings.TrimSpace(line))
		}
	}
	assert.Contains(t, s, `@deny4 counter name "c_deny" drop`, "dry run: deny must still drop")
}

// TestRulesetInNamespace applies the twin on the edge end of a storm
// topology and sends real frames at it: a deny-listed source, an
// allow-listed one, a flooding one, and a flood of strangers; nftables'
// own counters must show each handled as the shield would.
func TestRulesetInNamespace(t *testing.T) {
	if testutil.InVM() {
		// The twin is host tooling, not a kernel-matrix program: the
		// guests carry neither nft nor the nf_tables modules.
		t.Skip("the nftables twin is tested on the host, not in the VM matrix")
	}
	testutil.Root(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.SkipOrFail(t, "nft not installed (ci/deps.sh installs nftables)")
	}
	top, err := storm.NewTopology()
	require.NoError(t, err)
	t.Cleanup(func() { top.Close() })
	gen, err := storm.NewPacketGenerator(top.Storm, top.StormIfindex)
	require.NoError(t, err)
	defer gen.Close()
	run := nft.Command(top.Edge.Command)
	ctx := context.Background()

	type want struct {
		counter  string // every arrived frame counted here ...
		passed   bool   // ... and passed (allow, ok) rather than dropped
		limited  bool   // passes at most burst + rate*t, the rest count as limit
		admitted bool   // strangers: at most admission burst + rate*t pass
		// The counters of a limited class: ok and limit unless named.
		pass, drop string
	}
	protect443 := func(c *nft.Config) {
		c.Protected = []nft.Destination{{Proto: "tcp", Port: 443}}
		c.Unprotected = nft.Class{Rate: 1000, Burst: 500, AdmissionRate: 10000, AdmissionBurst: 10000}
	}
	for _, tc := range []struct {
		name   string
		limits config.Limits
		mod    func(*nft.Config)
		flow   storm.Flow
		frames uint32
		want   want
	}{
		{"own4 spoofed", config.DefaultLimits(), func(c *nft.Config) { c.Own = []netip.Prefix{netip.PrefixFrom(storm.Few4, 32)} },
			storm.Flow{Proto: storm.UDP, First: storm.Few4, Count: 1}, 3000, want{counter: nft.CounterSpoofed}},
		{"own6 spoofed over allow", config.DefaultLimits(), func(c *nft.Config) { c.Own = []netip.Prefix{netip.PrefixFrom(storm.Allowed6, 128)} },
			storm.Flow{Proto: storm.UDP, First: storm.Allowed6, Count: 1}, 3000, want{counter: nft.CounterSpoofed}},
		{"syn4 to a protected port", config.Limits{Rate: 1000, Burst: 500, AdmissionRate: 10000, AdmissionBurst: 10000}, protect443,
			storm.Flow{Proto: storm.TCPSYN, First: storm.Few4, Count: 1}, 20000, want{limited: true}},
		{"udp4 to an ephemeral port: return traffic", config.Limits{Rate: 10, Burst: 10, AdmissionRate: 10000, AdmissionBurst: 10000},
			func(c *nft.Config) {
				protect443(c)
				c.Ephemeral = config.PortRange{Lo: storm.DatagramPort, Hi: storm.DatagramPort}
			},
			storm.Flow{Proto: storm.UDP, First: storm.Few4, Count: 1}, 20000, want{limited: true, pass: nft.CounterUnprotectedPass, drop: nft.CounterUnprotectedDrop}},
		{"udp4 to another port: protected", config.Limits{Rate: 1000, Burst: 500, AdmissionRate: 10000, AdmissionBurst: 10000}, protect443,
			storm.Flow{Proto: storm.UDP, First: storm.Few4, Count: 1}, 20000, want{limited: true}},
		{"syn4 to a port no one names: protected", config.Limits{Rate: 1000, Burst: 500, AdmissionRate: 10000, AdmissionBurst: 10000}, protect443,
			storm.Flow{Proto: storm.TCPSYNOther, First: storm.Few4, Count: 1}, 20000, want{limited: true}},
		{"syn6 behind destination options: protected", config.Limits{Rate: 1000, Burst: 500, AdmissionRate: 10000, AdmissionBurst: 10000}, protect443,
			storm.Flow{Proto: storm.TCPSYNExt, First: storm.Few6, Count: 1}, 20000, want{limited: true}},
		{"16 sources of one /24 share a bucket", config.Limits{Rate: 1000, Burst: 500, AdmissionRate: 10000, AdmissionBurst: 10000},
			func(c *nft.Config) { c.KeyPrefix4 = 24 },
			storm.Flow{Proto: storm.UDP, First: storm.Few4, Count: 16}, 20000, want{limited: true}},
		{"deny4", config.DefaultLimits(), nil, storm.Flow{Proto: storm.UDP, First: storm.Denied4, Count: 1}, 3000, want{counter: nft.CounterDeny}},
		{"deny6", config.DefaultLimits(), nil, storm.Flow{Proto: storm.UDP, First: storm.Denied6, Count: 1}, 3000, want{counter: nft.CounterDeny}},
		{"allow4 over the limit", config.Limits{Rate: 100, Burst: 100, AdmissionRate: 100, AdmissionBurst: 100}, nil,
			storm.Flow{Proto: storm.UDP, First: storm.Allowed4, Count: 1}, 3000, want{counter: nft.CounterAllow, passed: true}},
		{"flood4", config.Limits{Rate: 1000, Burst: 500, AdmissionRate: 10000, AdmissionBurst: 10000}, nil,
			storm.Flow{Proto: storm.UDP, First: storm.Few4, Count: 1}, 20000, want{limited: true}},
		{"flood6", config.Limits{Rate: 1000, Burst: 500, AdmissionRate: 10000, AdmissionBurst: 10000}, nil,
			storm.Flow{Proto: storm.UDP, First: storm.Few6, Count: 1}, 20000, want{limited: true}},
		{"strangers4", config.Limits{Rate: 1000, Burst: 500, AdmissionRate: 200, AdmissionBurst: 200}, nil,
			storm.Flow{Proto: storm.UDP, First: storm.Many4, Count: 20000}, 20000, want{admitted: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := nft.Config{Ifaces: []string{storm.EdgeDev, storm.FrontDev}, TableSize: 65536, Limits: tc.limits,
				Allow: []netip.Prefix{netip.PrefixFrom(storm.Allowed4, 32), netip.PrefixFrom(storm.Allowed6, 128)},
				Deny:  []netip.Prefix{netip.PrefixFrom(storm.Denied4, 32), netip.PrefixFrom(storm.Denied6, 128)}}
			if tc.mod != nil {
				tc.mod(&cfg)
			}
			rs, err := nft.Render(cfg)
			require.NoError(t, err)
			require.NoError(t, nft.Check(ctx, run, rs), "nft -c refuses the ruleset:\n%s", rs)
			// The links' counters before the table exists: whatever the
			// table counts, they count too.
			before, err := top.VethStats()
			require.NoError(t, err)
			require.NoError(t, nft.Apply(ctx, run, rs)) // a fresh table: fresh counters and sets
			t.Cleanup(func() { nft.Delete(ctx, run, "") })
			dst := storm.Edge4
			if tc.flow.First.Is6() {
				dst = storm.Edge6
			}
			tpl, err := storm.BuildTemplate(tc.flow, top.StormMAC, top.EdgeMAC, dst)
			require.NoError(t, err)
			start := time.Now()
			per, err := storm.Run(ctx, gen, storm.Spec{Templates: []storm.Template{tpl}, Duration: 20 * time.Second, MaxFrames: uint64(tc.frames)}, nil)
			require.NoError(t, err)
			time.Sleep(200 * time.Millisecond) // the ring drains
			elapsed := time.Since(start).Seconds()
			// Counters first: a frame they count was received before the
			// links' counters are read.
			c, err := nft.ReadCounters(ctx, run, "")
			require.NoError(t, err)
			after, err := top.VethStats()
			require.NoError(t, err)
			// Ours: what the generator handed over minus what the link
			// refused. The edge's link also receives a few frames of its
			// own (neighbour discovery), counted as ok or not at all.
			arrived := per[0] - (after.Storm.TxDropped - before.Storm.TxDropped)
			// The chain hooks both edge links: the client link's own
			// frames (neighbour discovery) count too.
			rx := after.Edge.RxPackets - before.Edge.RxPackets + after.Front.RxPackets - before.Front.RxPackets
			var total uint64
			for _, n := range c {
				total += n
			}
			t.Logf("sent and arrived %d (the edge's links received %d) in %.2fs, counters %v", arrived, rx, elapsed, c)
			require.GreaterOrEqual(t, arrived, uint64(tc.frames)/2, "only %d of %d frames arrived: nothing to judge", arrived, tc.frames)
			assert.Truef(t, total >= arrived && total <= rx, "counters total %d, want at least the %d frames of ours and at most the %d the edge's links received", total, arrived, rx)
			switch {
			case tc.want.counter != "":
				assert.GreaterOrEqual(t, c[tc.want.counter], arrived, "counter %s, want every arrived frame", tc.want.counter)
			case tc.want.limited:
				pass, drop := nft.CounterOK, nft.CounterLimit
				rate, burst := tc.limits.Rate, tc.limits.Burst
				if tc.want.pass != "" {
					pass, drop = tc.want.pass, tc.want.drop
					rate, burst = cfg.Unprotected.Rate, cfg.Unprotected.Burst
				}
				maxPass := uint64(float64(burst) + float64(rate)*elapsed + 2)
				assert.Truef(t, c[pass] <= maxPass && c[pass] >= burst, "%s = %d, want between the burst %d and burst + rate * %.2fs = %d", pass, c[pass], burst, elapsed, maxPass)
				assert.GreaterOrEqualf(t, c[drop]+maxPass, arrived, "%s = %d, want at least %d arrived - %d passable", drop, c[drop], arrived, maxPass)
			case tc.want.admitted:
				maxAdmit := uint64(float64(tc.limits.AdmissionBurst) + float64(tc.limits.AdmissionRate)*elapsed + 2)
				assert.GreaterOrEqualf(t, c[nft.CounterAdmission]+maxAdmit, arrived, "admission = %d, want at least %d arrived - %d admissible", c[nft.CounterAdmission], arrived, maxAdmit)
				n, err := nft.SetSize(ctx, run, "", "sources4")
				require.NoError(t, err)
				assert.Truef(t, uint64(n) <= maxAdmit && n >= int(tc.limits.AdmissionBurst), "sources4 holds %d strangers, want between the admission burst %d and %d", n, tc.limits.AdmissionBurst, maxAdmit)
			}
		})
	}
}

// TestRenderAggregates (issue 26, finding 2): an aggregate limit is one
// named limit per destination, checked in chain sources after the
// per-source bucket, counted as limit.
func TestRenderAggregates(t *testing.T) {
	l := config.DefaultLimits()
	l.Protected = append(l.Protected, config.Destination{Proto: counter.ProtoUDP, Port: 53}, config.Destination{Proto: counter.ProtoICMP})
	l.Aggregates = []config.Aggregate{
		{Destination: config.Destination{Proto: counter.ProtoUDP, Port: 53}, Rate: 10000, Burst: 20000},
		{Destination: config.Destination{Proto: counter.ProtoICMP}, Rate: 100, Burst: 200},
	}
	s, err := nft.Render(nft.Config{Ifaces: []string{"eth0"}, TableSize: 1024}.WithLimits(l))
	require.NoError(t, err)
	for _, want := range []string{
		"limit agg_udp_53 { rate over 10000/second burst 20000 packets }",
		"limit agg_icmp { rate over 100/second burst 200 packets }",
		`meta l4proto udp th dport 53 limit name "agg_udp_53" counter name "c_limit" drop`,
		`meta l4proto { icmp, ipv6-icmp } limit name "agg_icmp" counter name "c_limit" drop`,
	} {
		assert.Contains(t, s, want)
	}
	agg := strings.Index(s, `limit name "agg_udp_53"`)
	assert.Greater(t, agg, strings.Index(s, "update @sources6"), "the aggregate after the per-source bucket")
	assert.Less(t, agg, strings.Index(s, `counter name "c_ok" accept`), "the aggregate before the accept")
}
