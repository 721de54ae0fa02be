package datapath

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	shsource "github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/sim"
)

const sec = time.Second

// TestBurstThenRefill: a new source gets exactly its burst, then exactly one
// packet per 1/rate of virtual time, not a nanosecond earlier, and an idle
// bucket fills back to the burst, not beyond.
func TestBurstThenRefill(t *testing.T) {
	for _, tc := range []struct{ rate, burst uint64 }{
		{rate: 10, burst: 5},
		{rate: 1000, burst: 1},
		{rate: 3, burst: 100},
		{rate: 1_000_000, burst: 2000},
	} {
		t.Run(fmt.Sprintf("rate=%d,burst=%d", tc.rate, tc.burst), func(t *testing.T) {
			s := load(t, 4096, config.Limits{Rate: tc.rate, Burst: tc.burst, AdmissionRate: 100, AdmissionBurst: 100})
			f := sim.From("198.18.0.1", sim.UDP).Bytes()
			t0 := 1 * sec
			// 1/rate in ns, rounded up: the first instant a whole token is back.
			gap := time.Duration((uint64(sec) + tc.rate - 1) / tc.rate)
			udp := counter.ProtoUDP
			sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
				{Name: "burst", At: t0, Frame: f, Times: int(tc.burst), Want: sim.Pass, Delta: N(tc.burst, pass, counter.ReasonOK, udp)},
				{Name: "over burst", At: t0, Frame: f, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
				{Name: "1ns before a token", At: t0 + gap - 1, Frame: f, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
				{Name: "one token", At: t0 + gap, Frame: f, Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
				{Name: "only one", At: t0 + gap, Frame: f, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
				{Name: "idle refill is capped at burst", At: t0 + 1000*sec, Frame: f, Times: int(tc.burst), Want: sim.Pass, Delta: N(tc.burst, pass, counter.ReasonOK, udp)},
				{Name: "over burst again", At: t0 + 1000*sec, Frame: f, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
			}}.Run(t)
			src := source(t, s, "198.18.0.1")
			assert.Equal(t, 2*tc.burst+1, src.Passed, "Source().Passed")
			assert.Equal(t, uint64(4), src.Dropped, "Source().Dropped")
			assert.True(t, src.Limited, "Source().Limited")
			// Limited is as of the program's clock: one token later, the
			// next packet would pass.
			require.NoError(t, s.SetTime(uint64(t0+1000*sec+gap)))
			assert.False(t, source(t, s, "198.18.0.1").Limited, "Source().Limited a token later")
		})
	}
}

// TestRefillAtRate sends faster than the rate for a while and checks every
// verdict against the closed form of a bucket that never fills up again:
// packet i passes iff passed < burst + floor((t_i - t0) * rate / 1s).
// The closed form holds when gap < 1/rate and burst >= 2: after the burst
// the credit stays below one packet before a refill and below two after it,
// so the cap (burst packets) never clips a refill. Clipping is what
// TestBurstThenRefill's idle step checks.
func TestRefillAtRate(t *testing.T) {
	for _, tc := range []struct {
		rate, burst uint64
		gap         time.Duration
		n           int
	}{
		{rate: 10, burst: 5, gap: 7 * time.Millisecond, n: 400},
		{rate: 3, burst: 2, gap: 100 * time.Millisecond, n: 200},
		{rate: 1000, burst: 2, gap: 333 * time.Microsecond, n: 400},
		{rate: 7, burst: 3, gap: 100 * time.Millisecond, n: 300},
	} {
		t.Run(fmt.Sprintf("rate=%d,burst=%d,gap=%s", tc.rate, tc.burst, tc.gap), func(t *testing.T) {
			s := load(t, 4096, config.Limits{Rate: tc.rate, Burst: tc.burst, AdmissionRate: 100, AdmissionBurst: 100})
			f := sim.From("2001:db8::7", sim.TCP).Bytes()
			t0 := 5 * sec
			var steps []sim.Step
			var passed, dropped uint64
			for i := range tc.n {
				at := t0 + time.Duration(i)*tc.gap
				earned := tc.burst + uint64(at-t0)*tc.rate/uint64(sec)
				st := sim.Step{Name: fmt.Sprintf("packet %d", i), At: at, Frame: f}
				if passed < earned {
					passed++
					st.Want, st.Delta = sim.Pass, One(pass, counter.ReasonOK, counter.ProtoTCP)
				} else {
					dropped++
					st.Want, st.Delta = sim.Drop, One(drop, counter.ReasonLimit, counter.ProtoTCP)
				}
				steps = append(steps, st)
			}
			require.NotZero(t, dropped, "the test must send faster than the rate")
			sim.Scenario{Name: t.Name(), Target: Target(s), Steps: steps}.Run(t)
			src := source(t, s, "2001:db8::7")
			assert.Equal(t, passed, src.Passed, "Source().Passed")
			assert.Equal(t, dropped, src.Dropped, "Source().Dropped")
		})
	}
}

// TestLists: allow beats deny and is never limited; deny drops even a source
// with tokens; neither list inserts the source into the table.
func TestLists(t *testing.T) {
	s := load(t, 4096, config.Limits{Rate: 1, Burst: 2, AdmissionRate: 100, AdmissionBurst: 100})
	addList(t, s, lists.DenyList, "198.18.0.0/15", "2001:db8::/32")
	addList(t, s, lists.AllowList, "198.18.1.0/24", "2001:db8:1::/48")
	tcp, udp, icmp := counter.ProtoTCP, counter.ProtoUDP, counter.ProtoICMP
	allowed4 := sim.From("198.18.1.9", sim.TCP).Bytes()
	allowed6 := sim.From("2001:db8:1::9", sim.UDP, sim.Double...).Bytes()
	denied4 := sim.From("198.19.0.1", sim.ICMP, sim.Single...).Bytes()
	denied6 := sim.From("2001:db8:2::1", sim.TCP).Bytes()
	outside := sim.From("203.0.113.1", sim.UDP).Bytes()
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		{Name: "allow beats deny (v4)", At: sec, Frame: allowed4, Times: 50, Want: sim.Pass, Delta: N(50, pass, counter.ReasonAllow, tcp)},
		{Name: "allow beats deny (v6, double tagged)", At: sec, Frame: allowed6, Times: 50, Want: sim.Pass, Delta: N(50, pass, counter.ReasonAllow, udp)},
		{Name: "deny drops (v4, tagged)", At: sec, Frame: denied4, Times: 3, Want: sim.Drop, Delta: N(3, drop, counter.ReasonDeny, icmp)},
		{Name: "deny drops (v6)", At: sec, Frame: denied6, Want: sim.Drop, Delta: One(drop, counter.ReasonDeny, tcp)},
		{Name: "unlisted is limited", At: sec, Frame: outside, Times: 2, Want: sim.Pass, Delta: N(2, pass, counter.ReasonOK, udp)},
		{Name: "unlisted over burst", At: sec, Frame: outside, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
	}}.Run(t)
	n, err := s.CountSources(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "CountSources() after listed traffic")

	// Removing the allow entry exposes the deny list, without a reload.
	ps, err := lists.ParsePrefixes([]string{"198.18.1.0/24"})
	require.NoError(t, err)
	require.NoError(t, second(s.Remove(lists.AllowList, ps)))
	sim.Scenario{Name: t.Name() + "/after remove", Target: Target(s), Steps: []sim.Step{
		{Name: "now denied", At: sec, Frame: allowed4, Want: sim.Drop, Delta: One(drop, counter.ReasonDeny, tcp)},
		{Name: "v6 still allowed", At: sec, Frame: allowed6, Want: sim.Pass, Delta: One(pass, counter.ReasonAllow, udp)},
	}}.Run(t)
}

// TestFamiliesAndTags: IPv6 and VLAN-tagged (802.1Q, and 802.1ad over
// 802.1Q) sources are limited exactly like an untagged IPv4 source, each
// counted under its own protocol, and share one bucket per address whatever
// the tagging.
func TestFamiliesAndTags(t *testing.T) {
	const burst = 4
	s := load(t, 4096, config.Limits{Rate: 1, Burst: burst, AdmissionRate: 1000, AdmissionBurst: 1000})
	tags := map[string][]sim.Tag{"untagged": nil, "802.1Q": sim.Single, "802.1ad+802.1Q": sim.Double}
	n := 0
	for _, fam := range []string{"ipv4", "ipv6"} {
		for _, tagName := range []string{"untagged", "802.1Q", "802.1ad+802.1Q"} {
			for _, l4 := range []sim.L4{sim.TCP, sim.UDP, sim.ICMP} {
				n++
				src := fmt.Sprintf("198.18.3.%d", n)
				if fam == "ipv6" {
					src = fmt.Sprintf("2001:db8:3:%x::1", n) // one /64 each: a source
				}
				t.Run(fmt.Sprintf("%s/%s/%s", fam, tagName, l4), func(t *testing.T) {
					f := sim.From(src, l4, tags[tagName]...).Bytes()
					p := protoOf(l4)
					sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
						{Name: "burst", At: sec, Frame: f, Times: burst, Want: sim.Pass, Delta: N(burst, pass, counter.ReasonOK, p)},
						{Name: "limited", At: sec, Frame: f, Times: 3, Want: sim.Drop, Delta: N(3, drop, counter.ReasonLimit, p)},
						{Name: "refill", At: 2 * sec, Frame: f, Want: sim.Pass, Delta: One(pass, counter.ReasonOK, p)},
					}}.Run(t)
					got := source(t, s, src)
					want := shsource.Source{Addr: got.Addr, Prefix: got.Prefix, Passed: burst + 1, Dropped: 3, Limited: true}
					assert.Equal(t, want, got, "Source(%s)", src)
					wantPrefix := 32
					if fam == "ipv6" {
						wantPrefix = 64
					}
					assert.Equal(t, wantPrefix, got.Prefix.Bits(), "Source(%s).Prefix", src)
				})
			}
		}
	}
	// The same address untagged and double tagged is one source.
	sim.Scenario{Name: t.Name() + "/one bucket per address", Target: Target(s), Steps: []sim.Step{
		{Name: "untagged", At: 3 * sec, Frame: sim.From("198.18.4.1", sim.UDP).Bytes(), Times: burst, Want: sim.Pass},
		{Name: "double tagged, same source", At: 3 * sec, Frame: sim.From("198.18.4.1", sim.TCP, sim.Double...).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, counter.ProtoTCP)},
	}}.Run(t)
}

// TestDryRun: would-be limit and admission drops are counted under their
// reason and pass; lists still apply; turning dry-run off enforces at once.
func TestDryRun(t *testing.T) {
	l := config.Limits{Rate: 1, Burst: 2, AdmissionRate: 1, AdmissionBurst: 1, DryRun: true}
	s := load(t, 4096, l)
	addList(t, s, lists.DenyList, "198.18.9.0/24")
	udp := counter.ProtoUDP
	a := sim.From("198.18.0.1", sim.UDP).Bytes()
	b := sim.From("198.18.0.2", sim.UDP).Bytes()
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		{Name: "burst", At: sec, Frame: a, Times: 2, Want: sim.Pass, Delta: N(2, pass, counter.ReasonOK, udp)},
		{Name: "would be limited", At: sec, Frame: a, Times: 5, Want: sim.Pass, Delta: N(5, pass, counter.ReasonLimit, udp)},
		{Name: "would not be admitted", At: sec, Frame: b, Times: 3, Want: sim.Pass, Delta: N(3, pass, counter.ReasonAdmission, udp)},
		{Name: "deny still drops", At: sec, Frame: sim.From("198.18.9.1", sim.UDP).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonDeny, udp)},
	}}.Run(t)
	got := source(t, s, "198.18.0.1")
	assert.Equal(t, uint64(2), got.Passed, "Source().Passed")
	assert.Equal(t, uint64(5), got.Dropped, "Source().Dropped (would-be drops)")
	_, ok, err := s.Source(netipAddr("198.18.0.2"))
	require.NoError(t, err)
	assert.False(t, ok, "a stranger refused admission in dry-run must not be inserted")

	l.DryRun = false
	require.NoError(t, s.SetLimits(l))
	sim.Scenario{Name: t.Name() + "/enforcing", Target: Target(s), Steps: []sim.Step{
		{Name: "limited", At: sec, Frame: a, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
		{Name: "not admitted", At: sec, Frame: b, Want: sim.Drop, Delta: One(drop, counter.ReasonAdmission, udp)},
	}}.Run(t)
}

// TestRealClocks: the production clocks (jiffies, the default, and ktime)
// load and limit. Only what cannot depend on timing is asserted: with a rate
// of one packet per 1000 s, the burst passes and the next packets drop.
func TestRealClocks(t *testing.T) {
	testutil.Root(t)
	for _, c := range []config.Clock{config.ClockJiffies, config.ClockKtime} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			s, err := shield.Load(shield.Options{Compat: *compat, TableSize: 1024, Clock: c,
				Limits: config.Limits{Rate: 1, Burst: 3, AdmissionRate: 1, AdmissionBurst: 1}})
			require.NoError(t, err)
			defer s.Close()
			require.Error(t, s.SetTime(1), "SetTime() on a real clock")
			f := sim.From("198.18.0.1", sim.UDP).Bytes()
			sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
				{Name: "burst", Frame: f, Times: 3, Want: sim.Pass, Delta: N(3, pass, counter.ReasonOK, counter.ProtoUDP)},
				{Name: "limited", Frame: f, Times: 3, Want: sim.Drop, Delta: N(3, drop, counter.ReasonLimit, counter.ProtoUDP)},
				{Name: "admission spent", Frame: sim.From("198.18.0.2", sim.UDP).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonAdmission, counter.ProtoUDP)},
			}}.Run(t)
		})
	}
}

// clockResolution is how far one reading of c may be from the real time:
// a jiffy (measured as the loader does: 1e9/CONFIG_HZ, at most 10 ms) or
// a nanosecond.
func clockResolution(c config.Clock) time.Duration {
	if c == config.ClockJiffies {
		return 10 * time.Millisecond // HZ=100, the coarsest Linux offers
	}
	return time.Microsecond // ktime: ns, plus the helper call
}

// clockNow reads the program's clock (Shield.ClockNow), in ns.
func clockNow(t *testing.T, s *shield.Shield) uint64 {
	t.Helper()
	ns, err := s.ClockNow()
	require.NoError(t, err)
	return ns
}

// runTimed sends f until the program drops it (at most max times) and
// returns how many passed, and the program's clock (Shield.ClockNow, ns)
// read just before and just after the last send (the one dropped): that
// send's reading lies between the two.
func runTimed(t *testing.T, s *shield.Shield, f []byte, max int) (passed int, lastStart, end uint64) {
	t.Helper()
	for range max {
		lastStart = clockNow(t, s)
		got, err := sim.Run(s.Program(), f)
		require.NoError(t, err)
		if got == sim.Drop {
			return passed, lastStart, clockNow(t, s)
		}
		passed++
	}
	require.FailNow(t, fmt.Sprintf("still passing after %d packets", max))
	return
}

// TestRealClockRates: the production clocks refill at the configured rate
// over a measured real interval, not only "the burst passes, the next
// packet drops" (a jiffies clock not converted to nanoseconds passes that).
// A drained bucket is left alone for about 400 ms, then sent to until it
// drops: it must pass rate x (the time between the last refill of the
// drain and the last packet of the refilled burst) packets, give or take a
// resolution step at each end and the credit a drained bucket keeps (under
// one packet). The interval is bounded by the program's own clock read
// around the syscalls (Shield.ClockNow, converted to nanoseconds by user
// space, so a program that forgets the conversion still fails), not by the
// wall clock: a guest starved of its CPU sees its jiffies lag the wall
// clock (68 packets passed where 77 to 87 were wanted, in a matrix with
// two VMs on two cores), and a slow (TCG) machine widens the window rather
// than failing. Source().Limited must agree with the program: true
// just after a drop (and the next packet drops), false once a token has
// been earned (and the next packet passes).
func TestRealClockRates(t *testing.T) {
	testutil.Root(t)
	const rate, burst = 200, 1000 // 5 ms a token; the burst is never reached by a refill below
	for _, c := range []config.Clock{config.ClockJiffies, config.ClockKtime} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			s, err := shield.Load(shield.Options{Compat: *compat, TableSize: 1024, Clock: c,
				Limits: config.Limits{Rate: rate, Burst: burst, AdmissionRate: 100, AdmissionBurst: 100}})
			require.NoError(t, err)
			defer s.Close()
			res := clockResolution(c)
			f := sim.From("198.18.0.1", sim.UDP).Bytes()

			// Drain: the burst, and what refills while it is sent.
			n, dStart, dEnd := runTimed(t, s, f, 10*burst)
			wallStart := time.Now()
			require.GreaterOrEqual(t, n, burst-1, "a new source's first burst")
			time.Sleep(400 * time.Millisecond)
			got, bStart, bEnd := runTimed(t, s, f, 10*burst)
			wall := time.Since(wallStart)

			// The program's clock keeps time: over about the same stretch
			// (the wall clock's starts a syscall later) it ran neither
			// more than a tenth faster than the wall clock nor more than a
			// quarter behind it (a starved guest's jiffies lag, by tens of
			// ms here). A jiffy of the wrong length (the next HZ is 20% off
			// or more) fails this, whatever the bounds below say.
			prog := time.Duration(bEnd - dEnd)
			assert.LessOrEqual(t, prog, wall*11/10+2*res, "the program's clock over %v of wall clock", wall)
			assert.GreaterOrEqual(t, prog, wall*3/4, "the program's clock over %v of wall clock", wall)

			// Credit earned = rate x (the clock at the burst's last packet
			// - the clock at the drain's last packet); each reading lies
			// between the program's clock read around its send, within a
			// resolution step.
			minElapsed := time.Duration(bStart-dEnd) - 2*res
			maxElapsed := time.Duration(bEnd-dStart) + 2*res
			lo := int(float64(rate)*minElapsed.Seconds()) - 1
			hi := int(float64(rate)*maxElapsed.Seconds()) + 1
			t.Logf("%s: %d packets passed after %s of the program's clock (bounds %s..%s): want %d..%d", c, got, time.Duration(bStart-dEnd).Round(time.Millisecond), minElapsed.Round(time.Millisecond), maxElapsed.Round(time.Millisecond), lo, hi)
			assert.GreaterOrEqual(t, got, lo, "packets passed over an interval of the program's clock (rate %d/s)", rate)
			assert.LessOrEqual(t, got, hi, "packets passed over an interval of the program's clock (rate %d/s)", rate)
		})
		t.Run(fmt.Sprint(c)+"/Limited", func(t *testing.T) {
			const slow = 2 // a token every 500 ms: a check right after a drop has time to run
			s, err := shield.Load(shield.Options{Compat: *compat, TableSize: 1024, Clock: c,
				Limits: config.Limits{Rate: slow, Burst: 2, AdmissionRate: 100, AdmissionBurst: 100}})
			require.NoError(t, err)
			defer s.Close()
			f := sim.From("2001:db8::5", sim.TCP).Bytes()
			_, _, dropped := runTimed(t, s, f, 100)
			lim := source(t, s, "2001:db8::5").Limited
			got, err := sim.Run(s.Program(), f)
			require.NoError(t, err)
			since := func() time.Duration { return time.Duration(clockNow(t, s) - dropped) }
			if since() < 500*time.Millisecond-clockResolution(c) {
				assert.True(t, lim, "Source().Limited right after a drop")
				assert.Equal(t, sim.Drop, got, "Run() right after a drop")
			}
			// A token's time later by the program's clock (a starved
			// guest's jiffies lag the wall clock).
			wait := time.Second/slow + 2*clockResolution(c)
			time.Sleep(wait)
			for deadline := time.Now().Add(10 * time.Second); since() < wait; {
				require.True(t, time.Now().Before(deadline), "the program's clock did not advance %v in 10 s", wait)
				time.Sleep(clockResolution(c))
			}
			lim = source(t, s, "2001:db8::5").Limited
			got, err = sim.Run(s.Program(), f)
			require.NoError(t, err)
			assert.False(t, lim, "Source().Limited a token's time later")
			assert.Equal(t, sim.Pass, got, "Run() a token's time later")
		})
	}
}
