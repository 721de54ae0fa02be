package e2e

import (
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"xdpshield/shield"
)

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// fill computes a phase's figures from what was recorded and read.
func (r *run) fill(ph *Phase, s *Samples, before, after snapshot, sent map[stormKind][]uint64) {
	ph.Legit.Kinds = map[string]Dist{}
	if s != nil {
		secs := s.End.Sub(s.Start).Seconds()
		for k := range numKinds {
			lat := s.Lat[k]
			d := Dist{N: len(lat), Fail: s.Fail[k]}
			if len(lat) > 0 {
				d.P50Ms = ms(Quantile(lat, 0.50))
				d.P99Ms = ms(Quantile(lat, 0.99))
				d.MaxMs = ms(Quantile(lat, 1))
			}
			ph.Legit.Kinds[Kind(k).String()] = d
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
	for _, a := range []netip.Addr{Client4, Client6} {
		b, okb := before.client[a]
		e, oka := after.client[a]
		switch {
		case oka && okb && e.Passed >= b.Passed && e.Dropped >= b.Dropped:
			ph.Legit.Seen += e.Passed - b.Passed + e.Dropped - b.Dropped
			ph.Legit.Dropped += e.Dropped - b.Dropped
		case oka:
			// Admitted (again) during the phase: what it holds is all new.
			ph.Legit.Seen += e.Passed + e.Dropped
			ph.Legit.Dropped += e.Dropped
		}
	}

	ph.Sent.Generator = r.gen.Name()
	ph.Sent.ByFlow = map[string]uint64{}
	if stormKind(ph.Storm) != stormNone {
		for k, per := range sent {
			for i, n := range per {
				ph.Sent.ByFlow[r.names[k][i]] += n
				ph.Sent.Frames += n
				switch r.roles[k][i] {
				case "allowed":
					ph.Sent.Allowed += n
				case "denied":
					ph.Sent.Denied += n
				default:
					ph.Sent.Storm += n
				}
			}
		}
		if ph.Seconds > 0 {
			ph.Sent.PPS = float64(ph.Sent.Frames) / ph.Seconds
		}
	}
	a, b := after.veth, before.veth
	ph.Veth.Dropped = a.Storm.TxDropped - b.Storm.TxDropped
	ph.Veth.Received = a.Edge.RxPackets - b.Edge.RxPackets
	ph.Veth.EdgeRxDropped = a.Edge.RxDropped - b.Edge.RxDropped
	ph.Veth.ClientDropped = a.Front.RxDropped - b.Front.RxDropped
	ph.Veth.ClientRx = a.Front.RxPackets - b.Front.RxPackets
	if ph.Shield {
		d := after.counters.Sub(before.counters)
		ph.Counters = &CounterStats{Pass: byReason(d, shield.Pass), Drop: byReason(d, shield.Drop), Total: d.Total()}
	}
}

// byReason sums c's packets of verdict v over protocols, by reason name.
func byReason(c shield.Counters, v shield.Verdict) map[string]uint64 {
	m := map[string]uint64{}
	for _, reason := range shield.Reasons() {
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

// assert adds the phase's assertions (none for the contrast run).
func (r *run) assert(ph *Phase, k stormKind) {
	if !ph.Shield {
		return
	}
	b := r.cfg.Budget
	l := ph.Legit
	r.check(ph, "legit success", l.Requests > 0 && l.Success >= b.MinSuccess,
		"%d/%d requests succeeded (%.3f%%), want >= %.3f%%", l.Requests-l.Failures, l.Requests, 100*l.Success, 100*b.MinSuccess)
	r.check(ph, "legit never dropped", l.Dropped == 0 && l.Seen > 0,
		"the shield saw %d packets of the client's sources and dropped %d", l.Seen, l.Dropped)
	if ph.Name != "baseline" {
		for kind := range numKinds {
			name := Kind(kind).String()
			p99 := time.Duration(l.Kinds[name].P99Ms * 1e6)
			limit := b.Limit(Kind(kind), r.base[kind])
			floor := b.P99Floor
			if Kind(kind) == KeepAlive {
				floor = b.P99FloorKeep
			}
			capped := "no cap"
			if b.P99Cap > 0 {
				capped = "cap " + b.P99Cap.String()
			}
			r.check(ph, "p99 "+name+" within budget", p99 > 0 && p99 <= limit,
				"p99 %.2f ms, baseline %.2f ms, budget %.2f ms (%.0fx baseline floored at %v, %s)",
				ms(p99), ms(r.base[kind]), ms(limit), b.P99Ratio, floor, capped)
		}
	}
	if a := ph.API; a != nil {
		r.check(ph, "api answers", a.Polls > 0 && a.Failures == 0,
			"%s: %d polls, %d failed, slowest %.1f ms %s", a.Prober, a.Polls, a.Failures, a.MaxMs, a.LastErr)
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
	lim, adm := c.Drop["limit"], c.Drop["admission"]
	switch k {
	case stormFew:
		r.check(ph, "drops attributed to limit", lim > 0 && float64(lim) >= 0.999*float64(lim+adm),
			"limit %d, admission %d: want limit >= 99.9%%", lim, adm)
		// The few sources pass no more than their buckets allow.
		n := float64(2 * r.cfg.FewSources)
		allowed := n * (float64(r.cfg.Limits.Rate)*(ph.Seconds+r.cfg.Settle.Seconds()) + float64(r.cfg.Limits.Burst))
		passed := float64(c.Pass["ok"]) - float64(l.Seen)
		r.check(ph, "few sources held to their limit", passed <= 1.25*allowed,
			"%.0f storm packets passed; %v sources at %d/s burst %d allow %.0f (+25%% for multi-CPU refills)",
			passed, n, r.cfg.Limits.Rate, r.cfg.Limits.Burst, allowed)
	case stormMany:
		r.check(ph, "drops attributed to admission", adm > 0 && float64(adm) >= 0.99*float64(lim+adm),
			"admission %d, limit %d: want admission >= 99%%", adm, lim)
	}
}
