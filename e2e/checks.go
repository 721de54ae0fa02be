package e2e

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/shield/counter"
)

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// fill computes a phase's figures from what was recorded and read.
func (r *run) fill(ph *Phase, s *parts.Samples, before, after snapshot, sent map[stormKind][]uint64) {
	ph.Legit.Kinds = map[string]Dist{}
	if s != nil {
		secs := s.End.Sub(s.Start).Seconds()
		for k := range parts.NumKinds {
			lat := s.Lat[k]
			d := Dist{N: len(lat), Fail: s.Fail[k]}
			if len(lat) > 0 {
				d.P50Ms = ms(parts.Quantile(lat, 0.50))
				d.P99Ms = ms(parts.Quantile(lat, 0.99))
				d.MaxMs = ms(parts.Quantile(lat, 1))
			}
			ph.Legit.Kinds[parts.Kind(k).String()] = d
			ph.Legit.Requests += len(lat) + s.Fail[k]
			ph.Legit.Failures += s.Fail[k]
		}
		if secs > 0 {
			ph.Legit.RatePerSec = float64(ph.Legit.Requests) / secs
		}
		if ph.Legit.Requests > 0 {
			ph.Legit.Success = 1 - float64(ph.Legit.Failures)/float64(ph.Legit.Requests)
		}
		if len(s.Errors) > 0 {
			ph.Legit.Errors = s.Errors
		}
	}
	for _, a := range []netip.Addr{storm.Client4, storm.Client6} {
		passed, dropped := sourceDelta(before, after, a)
		ph.Legit.Seen += passed + dropped
		ph.Legit.Dropped += dropped
	}

	ph.Sent.Generator = r.storm.Name()
	ph.Sent.ByFlow = map[string]uint64{}
	if stormKind(ph.Storm) != stormNone {
		perSource := map[bool]uint64{} // by family (is IPv4): the most frames one storm source got
		for k, per := range sent {
			for i, n := range per {
				f := r.flows[k][i]
				ph.Sent.ByFlow[f.name()] += n
				ph.Sent.Frames += n
				switch f.role {
				case "allowed":
					ph.Sent.Allowed += n
				case "denied":
					ph.Sent.Denied += n
				default:
					ph.Sent.Storm += n
					if f.Proto == storm.UDP {
						ph.Sent.AtService += n
					}
					perSource[f.First.Is4()] += ceilDiv(n, uint64(f.Count))
				}
			}
		}
		ph.Sent.MaxPerSource = max(perSource[true], perSource[false])
		if ph.Seconds > 0 {
			ph.Sent.PPS = float64(ph.Sent.Frames) / ph.Seconds
		}
	}
	if stormKind(ph.Storm) == stormFew && ph.Shield {
		per := sent[stormFew]
		for _, a := range r.few {
			st := SourceStats{Addr: a.String()}
			for i, f := range r.flows[stormFew] {
				if f.First.Is4() == a.Is4() {
					// A template cycles through its Count sources in
					// order, so each got n/Count of its n frames,
					// within one.
					st.SentMin += per[i] / uint64(f.Count)
					st.SentMax += ceilDiv(per[i], uint64(f.Count))
				}
			}
			st.Passed, st.Dropped = sourceDelta(before, after, a)
			ph.Few = append(ph.Few, st)
		}
	}
	a, b := after.veth, before.veth
	ph.Veth.Dropped = a.Storm.TxDropped - b.Storm.TxDropped
	ph.Veth.Received = a.Edge.RxPackets - b.Edge.RxPackets
	ph.Veth.EdgeRxDropped = a.Edge.RxDropped - b.Edge.RxDropped
	ph.Veth.ClientDropped = a.Front.RxDropped - b.Front.RxDropped
	ph.Veth.ClientRx = a.Front.RxPackets - b.Front.RxPackets
	ph.Service = ServiceStats{Capacity: r.cfg.UDPCapacity, Answered: after.served - before.served, Kernel: after.udp.Sub(before.udp)}
	if ph.Shield {
		d := after.counters.Sub(before.counters)
		ph.Counters = &CounterStats{Pass: byReason(d, counter.Pass), Drop: byReason(d, counter.Drop), Total: d.Total()}
	}
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// sourceDelta is what the shield counted of source a between two snapshots.
func sourceDelta(before, after snapshot, a netip.Addr) (passed, dropped uint64) {
	b, okb := before.sources[a]
	e, oka := after.sources[a]
	switch {
	case oka && okb && e.Passed >= b.Passed && e.Dropped >= b.Dropped:
		return e.Passed - b.Passed, e.Dropped - b.Dropped
	case oka:
		// Admitted (again) during the phase: what it holds is all new.
		return e.Passed, e.Dropped
	}
	return 0, 0
}

// byReason sums c's packets of verdict v over protocols, by reason name.
func byReason(c counter.Counters, v counter.Verdict) map[string]uint64 {
	m := map[string]uint64{}
	for _, reason := range counter.Reasons() {
		var n uint64
		for _, x := range c[v][reason] {
			n += x
		}
		m[reason.String()] = n
	}
	return m
}

func (r *run) check(ph *Phase, name string, ok bool, format string, args ...any) {
	ph.Checks = append(ph.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
}

// budgetCheck adds a check of the legitimate client's budget: asserted with
// the shield attached, and required to fail somewhere without it.
func (r *run) budgetCheck(ph *Phase, name string, ok bool, format string, args ...any) {
	r.check(ph, name, ok, format, args...)
	ph.Checks[len(ph.Checks)-1].Budget = true
}

// strongEnough checks that a storm offered more than need frames: one that
// did not cannot show the shield limiting anything, and fails as too weak
// rather than passing or blaming the shield.
func (r *run) strongEnough(ph *Phase, sent, need uint64, why string) {
	verdict := "enough"
	if sent <= need {
		verdict = "storm too weak"
	}
	r.check(ph, "storm strong enough", sent > need, "%s: sent %d, need more than %d (%s)", verdict, sent, need, why)
}

// clockSlack covers the data path's clock: credit accrues per jiffy, which
// is at most 10 ms (HZ=100).
const clockSlack = 0.01

// drainSlack covers the frames still queued when the generator stops (a
// veth ring of 256 and the backlog), judged within milliseconds of it.
const drainSlack = 0.05

// assert adds the phase's assertions: the legitimate client's budget in
// every phase; with the shield attached, what the shield did, bounded by
// what was actually sent and the configured limits; without it, that the
// storm broke the budget.
func (r *run) assert(ph *Phase, k stormKind) {
	r.assertBudget(ph)
	if !ph.Shield {
		r.assertHarm(ph)
		return
	}
	l := ph.Legit
	r.check(ph, "legit never dropped", l.Dropped == 0 && l.Seen > 0,
		"the shield saw %d packets of the client's sources and dropped %d", l.Seen, l.Dropped)
	if a := ph.API; a != nil {
		r.check(ph, "api answers", a.Polls > 0 && a.Failures == 0,
			"%s: %d polls, %d failed, slowest %.1f ms %s", a.Request, a.Polls, a.Failures, a.MaxMs, a.LastErr)
	}
	r.check(ph, "table within capacity", ph.Table.Samples > 0 && ph.Table.Max <= int(ph.Table.Capacity),
		"at most %d entries seen over %d samples, capacity %d", ph.Table.Max, ph.Table.Samples, ph.Table.Capacity)
	if k == stormNone {
		return
	}
	c := ph.Counters
	// Everything the shield saw is what the generator sent, less what the
	// veth refused, plus the client's packets and ARP/NDP (not_ip, and a
	// few link-local ones: the slack, 0.01%).
	expect := int64(ph.Sent.Frames) - int64(ph.Veth.Dropped)
	got := int64(c.Total) - int64(l.Seen) - int64(c.Pass["not_ip"])
	slack := 20 + expect/10000 // NDP and the like from the storm namespace
	r.check(ph, "counters add up", got >= expect-slack && got <= expect+slack,
		"shield saw %d storm frames; generator sent %d, veth dropped %d: want %d ± %d",
		got, ph.Sent.Frames, ph.Veth.Dropped, expect, slack)
	vd := ph.Veth.Dropped
	r.check(ph, "allow-listed never dropped",
		c.Drop["allow"] == 0 && c.Pass["allow"] <= ph.Sent.Allowed && c.Pass["allow"]+vd >= ph.Sent.Allowed && ph.Sent.Allowed > 0,
		"sent %d, passed as allow %d, dropped %d (veth dropped %d of all)", ph.Sent.Allowed, c.Pass["allow"], c.Drop["allow"], vd)
	r.check(ph, "deny-listed always dropped",
		c.Pass["deny"] == 0 && c.Drop["deny"] <= ph.Sent.Denied && c.Drop["deny"]+vd >= ph.Sent.Denied && ph.Sent.Denied > 0,
		"sent %d, dropped as deny %d, passed %d (veth dropped %d of all)", ph.Sent.Denied, c.Drop["deny"], c.Pass["deny"], vd)

	// A dry-run shield counts what it would drop as passed, under the
	// same reason.
	lim := c.Drop["limit"] + c.Pass["limit"]
	adm := c.Drop["admission"] + c.Pass["admission"]
	// Every bound below holds over the phase and the moments after it in
	// which frames still queued are judged.
	secs := ph.Seconds + drainSlack + clockSlack
	extra := uint64(runtime.NumCPU() - 1) // CPUs that read a bucket's last credit at once
	lm := r.cfg.Limits
	switch k {
	case stormFew:
		maxPass := lm.Burst + uint64(float64(lm.Rate)*secs) + extra
		var sentMin, must uint64
		held := len(ph.Few) == len(r.few)
		var most SourceStats
		for _, s := range ph.Few {
			sentMin += s.SentMin
			must += s.SentMin - min(s.SentMin, maxPass)
			held = held && s.Passed <= maxPass && s.Passed+s.Dropped <= s.SentMax
			if s.Passed >= most.Passed {
				most = s
			}
		}
		r.strongEnough(ph, sentMin, 2*uint64(len(r.few))*maxPass,
			fmt.Sprintf("twice what %d buckets pass in %.2f s", len(r.few), secs))
		r.check(ph, "few sources held to their limit", held,
			"each of %d sources may pass %d (burst %d + %d/s x %.2f s + %d); the most: %s passed %d, refused %d of %d-%d sent",
			len(r.few), maxPass, lm.Burst, lm.Rate, secs, extra, most.Addr, most.Passed, most.Dropped, most.SentMin, most.SentMax)
		r.check(ph, "drops attributed to limit", lim > 0 && lim+vd >= must && float64(lim) >= 0.999*float64(lim+adm),
			"limit %d, admission %d: want limit >= %d (sent beyond the buckets) less the %d the veth dropped, and >= 99.9%% of both",
			lim, adm, must, vd)
	case stormMany:
		// Only admitted sources pass, and an admitted source passes at
		// most what it sent: the admission bucket bounds the rest.
		admits := lm.AdmissionBurst + uint64(float64(lm.AdmissionRate)*secs) + extra
		maxOK := admits * ph.Sent.MaxPerSource
		r.strongEnough(ph, ph.Sent.Storm, 2*maxOK,
			fmt.Sprintf("twice the %d admissions in %.2f s times the %d frames a forged source sent at most", admits, secs, ph.Sent.MaxPerSource))
		passed := uint64(max(int64(c.Pass["ok"])-int64(l.Seen), 0))
		r.check(ph, "forged sources held to admission", passed <= maxOK+uint64(slack),
			"%d storm frames passed; at most %d admissions (burst %d + %d/s x %.2f s + %d) of %d frames each allow %d (+%d for NDP)",
			passed, admits, lm.AdmissionBurst, lm.AdmissionRate, secs, extra, ph.Sent.MaxPerSource, maxOK, slack)
		must := uint64(max(int64(ph.Sent.Storm)-int64(vd)-int64(maxOK), 0))
		r.check(ph, "drops attributed to admission", adm > 0 && adm+lim >= must && float64(adm) >= 0.99*float64(lim+adm),
			"admission %d, limit %d: want both >= %d (sent %d, less %d the veth dropped, less %d admitted) and admission >= 99%%",
			adm, lim, must, ph.Sent.Storm, vd, maxOK)
	}
}

// assertBudget checks the legitimate client against the budget: each kind
// of request answered, and within its p99 (a datagram request's latency
// includes its resends).
func (r *run) assertBudget(ph *Phase) {
	b := r.cfg.Budget
	for kind := range parts.NumKinds {
		name := kind.String()
		if r.cfg.Client.Rate(kind) == 0 {
			continue
		}
		d := ph.Legit.Kinds[name]
		note := ""
		if kind == parts.Datagram {
			note = slowService(ph)
		}
		r.budgetCheck(ph, name+" success", d.N+d.Fail > 0 && d.success() >= b.MinSuccess,
			"%d/%d answered (%.2f%%), want >= %.2f%%%s", d.N, d.N+d.Fail, 100*d.success(), 100*b.MinSuccess, note)
	}
	if ph.Name == "baseline" {
		return
	}
	for kind := range parts.NumKinds {
		if r.cfg.Client.Rate(kind) == 0 {
			continue
		}
		name := kind.String()
		p99 := time.Duration(ph.Legit.Kinds[name].P99Ms * 1e6)
		limit := b.Limit(kind, r.base[kind])
		capped := "no cap"
		if b.P99Cap > 0 {
			capped = "cap " + b.P99Cap.String()
		}
		note := ""
		if kind == parts.Datagram {
			note = slowService(ph)
		}
		if b.P99Cap > 0 && r.base[kind] > b.P99Cap {
			note += "; the baseline itself is above the cap: this machine is too busy to judge"
		}
		r.budgetCheck(ph, "p99 "+name+" within budget", p99 > 0 && p99 <= limit,
			"p99 %.2f ms, baseline %.2f ms, budget %.2f ms (%.0fx baseline floored at %v, %s)%s",
			ms(p99), ms(r.base[kind]), ms(limit), b.P99Ratio, b.Floor(kind), capped, note)
	}
}

// slowService says, when the datagram service answered less than 80% of
// what it could have while its socket overflowed (the lesser of its
// capacity over the phase and what reached its socket), that the machine
// was too slow or too busy to run it at its pace: a budget broken then is
// the machine's as much as the storm's. Empty otherwise.
func slowService(ph *Phase) string {
	s := ph.Service
	arrived := s.Kernel.InDatagrams + s.Kernel.RcvbufErrors
	could := min(s.Capacity*ph.Seconds, float64(arrived))
	if s.Kernel.RcvbufErrors == 0 || float64(s.Answered) >= 0.8*could {
		return ""
	}
	return fmt.Sprintf("; the service answered %d of the %.0f it could while its socket dropped %d: this machine is too slow or busy for -udp-capacity %.0f",
		s.Answered, could, s.Kernel.RcvbufErrors, s.Capacity)
}

// HarmCheck names the check of a contrast phase (no program attached)
// that its storm broke the budget (assertHarm).
const HarmCheck = "storm hurts an unprotected edge"

// assertHarm checks that a storm with no program attached broke the budget
// the shielded edge is held to: a storm that does not hurt an unprotected
// edge proves nothing about the shield.
func (r *run) assertHarm(ph *Phase) {
	var broke []string
	for _, c := range ph.Checks {
		if c.Budget && !c.OK {
			broke = append(broke, c.Name)
		}
	}
	udp := 0.0
	if ph.Seconds > 0 {
		udp = float64(ph.Sent.AtService) / ph.Seconds
	}
	why := fmt.Sprintf("sent %.0f UDP frames/s at a service answering %.0f/s", udp, r.cfg.UDPCapacity)
	if len(broke) == 0 {
		if udp <= r.cfg.UDPCapacity {
			why = "storm too weak: " + why
		}
		r.check(ph, HarmCheck, false, "the storm did not hurt an unprotected edge; it proves nothing (%s)", why)
		return
	}
	r.check(ph, HarmCheck, true, "broke %s (%s)", strings.Join(broke, ", "), why)
}

// assertRestart checks a restart of the shield mid-storm (Restarter): the
// new service adopted the pinned link (same link ID, and it says so), and
// the program kept dropping the storm while no service ran.
func (r *run) assertRestart(ph *Phase, err error) {
	st := ph.Restart
	if st == nil {
		st = &parts.RestartStats{}
	}
	r.check(ph, "shield restarted mid-storm", err == nil, "%v", err)
	r.check(ph, "pinned link adopted by the new service", st.LinkBefore != 0 && st.LinkAfter == st.LinkBefore && st.Adopted,
		"link %d before, %d after; adopted log: %q", st.LinkBefore, st.LinkAfter, st.AdoptedNote)
	r.check(ph, "edge protected while no service ran", st.DropsDown > 0,
		"%d drops counted in the %.0f ms between the stop and the new service answering", st.DropsDown, st.DownMs)
}
