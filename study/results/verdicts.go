package results

import (
	"fmt"
	"strings"
	"time"
)

// GeneratorBound says why the drop-capacity figures from sources are set
// by the generator rather than by the receiver, or "" when they are not.
func (r *Results) GeneratorBound(sources string) string {
	if r.Generator != LiveFrames {
		return fmt.Sprintf("generator-bound: the storm generator is %s, not %s (BPF_F_TEST_XDP_LIVE_FRAMES needs kernel 5.18+; this one is %s): it sets every rate", r.Generator, LiveFrames, r.Kernel)
	}
	g, fl := r.DropOf("generator", sources), r.DropOf("floor", sources)
	if g == nil || fl == nil || g.SentPPS.N == 0 || fl.DropPPS.N == 0 {
		return "generator-bound: the generator's own rate or the floor was not measured, so nothing says the floor is the receiver's"
	}
	if x := Ratio(g.SentPPS.Median, fl.DropPPS.Median); x < GeneratorMargin {
		return fmt.Sprintf("generator-bound: the generator alone sent %s Mpps, only %.2fx the XDP_DROP floor's %s (wanted >= %.1fx)", Mpps(g.SentPPS.Median), x, Mpps(fl.DropPPS.Median), GeneratorMargin)
	}
	return ""
}

// OverGenerator is the nanoseconds per frame target d adds to the
// generator alone: the veth runs the receiver's XDP program in NAPI on
// the core that sent the frame, so the two costs add up on one core.
func (r *Results) OverGenerator(d *Drop) (float64, bool) {
	g := r.DropOf("generator", d.Sources)
	if g == nil || g.SentPPS.Median <= 0 || d.SentPPS.Median <= 0 {
		return 0, false
	}
	return 1e9/d.SentPPS.Median - 1e9/g.SentPPS.Median, true
}

// derive derives the defaults again from this run: the paced client's
// packets/s through the quiet shield, and its quiet datagram p99.
func (r *Results) derive() *Defaults {
	q := r.LegitOf("shield", PhaseFixed)
	if q == nil {
		return nil
	}
	var pps []float64
	for _, s := range q.Samples {
		if s.ClientPPS > 0 {
			pps = append(pps, s.ClientPPS)
		}
	}
	if len(pps) == 0 {
		return nil
	}
	capacity := r.Defaults.Capacity
	if capacity == 0 {
		capacity = UDPCapacity
	}
	base := time.Duration(0)
	if q.PooledUDPP99.OK() {
		base = time.Duration(float64(q.PooledUDPP99) * 1e6)
	}
	d := Derive(StatOf(pps).Median, capacity, datagramBudget(base))
	return &d
}

// stormUDP is the most UDP packets/s the study's few-source storm passes
// at a per-source rate: 32 sources, and storm.Run sends each tick's UDP
// first, so nearly all a source passes is UDP.
func StormUDP(rate uint64) float64 { return 32 * float64(rate) }

// Missing lists the configurations, phases and drop points that produced
// no numbers: what -quick checks.
func (r *Results) Missing() []string {
	var out []string
	if r.Ran(SectionPeers) {
		out = append(out, r.L7.Missing()...)
	}
	if r.Ran(SectionLists) {
		out = append(out, r.Lists.Missing()...)
	}
	if r.Ran(SectionXDPLB) {
		out = append(out, r.LB.Missing()...)
	}
	if !r.Ran(SectionMain) {
		return out
	}
	for _, c := range Configs {
		for _, ph := range []string{PhaseFixed, PhaseSaturation} {
			l := r.LegitOf(c.Name, ph)
			switch {
			case l == nil || len(l.Samples) == 0:
				out = append(out, c.Name+" "+ph+": not measured")
			case l.RPS.Median <= 0:
				out = append(out, c.Name+" "+ph+": no successful request")
			case l.CPUReq.Median <= 0:
				out = append(out, c.Name+" "+ph+": no CPU time read")
			case c.Probe && ph == PhaseFixed && l.ProbeN == 0:
				out = append(out, c.Name+" "+ph+": the probe timed nothing")
			}
		}
	}
	for _, src := range DropSources {
		for _, t := range DropTargets {
			d := r.DropOf(t, src)
			switch {
			case d == nil || len(d.Samples) == 0:
				out = append(out, "drop capacity "+t+"/"+src+": not measured")
			case t == "generator":
				if d.SentPPS.Median <= 0 {
					out = append(out, "drop capacity "+t+"/"+src+": nothing sent")
				}
			case d.SeenPPS.Median <= 0:
				out = append(out, "drop capacity "+t+"/"+src+": no frame reached the edge")
			case d.DropPPS.Median <= 0:
				out = append(out, "drop capacity "+t+"/"+src+": nothing dropped")
			}
		}
	}
	return out
}

func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// check is one condition of a target over runs: a >= k x b (or <=, with
// atMost), each run of a against the runs of b scaled by k.
type check struct {
	name   string
	a, b   []float64
	k      float64
	atMost bool
}

// judge gives a target its verdict from its checks: met when every
// check's medians are on the wanted side and its runs separate from the
// threshold (Mann-Whitney U, p < Alpha); missed when a check's medians
// are on the wrong side and its runs separate; otherwise the runs do not
// carry a verdict (Undecided). Test names every check's test.
func (t *Target) judge(cs ...check) {
	allOK, allSep, missed := true, true, false
	var tests []string
	for _, c := range cs {
		a, b := valid(c.a), valid(c.b)
		if len(a) == 0 || len(b) == 0 {
			t.Judged = false
			return
		}
		kb := make([]float64, len(b))
		for i, x := range b {
			kb[i] = c.k * x
		}
		ma, mb := StatOf(a).Median, StatOf(kb).Median
		ok := ma >= mb
		if c.atMost {
			ok = ma <= mb
		}
		sep, test := Differ(a, kb)
		tests = append(tests, c.name+": "+test)
		allOK = allOK && ok
		allSep = allSep && sep
		missed = missed || (!ok && sep)
	}
	t.Judged = true
	t.Met = allOK && allSep
	t.Undecided = !t.Met && !missed
	t.Test = strings.Join(tests, "; ")
}

func (r *Results) targets() []Target {
	var ts []Target
	get := func(name, ph string) *Legit { return r.LegitOf(name, ph) }
	rps := func(s Sample) float64 { return s.RPS }
	kap50 := func(s Sample) float64 { return float64(s.KAP50) }
	none, noneSat := get("none", PhaseFixed), get("none", PhaseSaturation)
	for _, pass := range []string{"shield-dryrun", "shield-allowall"} {
		l, sat := get(pass, PhaseFixed), get(pass, PhaseSaturation)
		t := Target{Name: pass + " passing everything", Want: "saturation throughput >= 97% of no program, keep-alive p50 within 5%"}
		if l != nil && sat != nil && none != nil && noneSat != nil {
			tp := Ratio(sat.RPS.Median, noneSat.RPS.Median)
			p50 := Ratio(l.KAP50.Median, none.KAP50.Median)
			t.Got = fmt.Sprintf("throughput %.1f%%, p50 %.2fx", 100*tp, p50)
			t.judge(check{"throughput", sat.Column(rps), noneSat.Column(rps), 0.97, false},
				check{"p50", l.Column(kap50), none.Column(kap50), 1.05, true})
		}
		ts = append(ts, t)
	}
	dropPPS := func(d *Drop) []float64 {
		var xs []float64
		for _, s := range d.Samples {
			xs = append(xs, s.DropPPS)
		}
		return xs
	}
	for _, dt := range []struct {
		sources, name string
		least         float64
	}{{"few", "drop capacity, few sources", 0.8}, {"many", "drop capacity, many forged sources", 0.5}} {
		fl, sh, nf := r.DropOf("floor", dt.sources), r.DropOf("shield", dt.sources), r.DropOf("nft", dt.sources)
		t := Target{Name: dt.name, Want: fmt.Sprintf("shield >= %.0f%% of the XDP_DROP floor and >= 3x nftables (frames/s at the edge), the generator alone >= %.1fx the floor", 100*dt.least, GeneratorMargin)}
		if fl != nil && sh != nil && nf != nil {
			a, b := Ratio(sh.DropPPS.Median, fl.DropPPS.Median), Ratio(sh.DropPPS.Median, nf.DropPPS.Median)
			t.Got = fmt.Sprintf("%.0f%% of the floor, %.1fx nftables", 100*a, b)
			if g := r.DropOf("generator", dt.sources); g != nil {
				t.Got += fmt.Sprintf("; generator %s Mpps = %.2fx the floor", Mpps(g.SentPPS.Median), Ratio(g.SentPPS.Median, fl.DropPPS.Median))
			}
			if np := r.DropOf("shield-nopass", dt.sources); np != nil {
				t.Got += fmt.Sprintf(" (passing almost nothing: %.0f%% of the floor)", 100*Ratio(np.DropPPS.Median, fl.DropPPS.Median))
			}
			t.judge(check{"floor", dropPPS(sh), dropPPS(fl), dt.least, false}, check{"nftables", dropPPS(sh), dropPPS(nf), 3, false})
			if t.Bound = r.GeneratorBound(dt.sources); t.Bound != "" {
				t.Met, t.Undecided = false, false
			}
		}
		ts = append(ts, t)
	}
	var t Target
	shQ, shS := get("shield", PhaseFixed), get("shield/storm", PhaseFixed)
	noS, nfS := get("none/storm", PhaseFixed), get("nft/storm", PhaseFixed)
	t = Target{Name: "legitimate p99 under storm", Want: "shield <= 1.5x its no-storm p99 (keep-alive); no protection and nftables above it"}
	if shQ != nil && shS != nil && noS != nil && nfS != nil {
		if !shQ.PooledKAP99.OK() || !shS.PooledKAP99.OK() || !noS.PooledKAP99.OK() || !nfS.PooledKAP99.OK() {
			t.Got = fmt.Sprintf("p99 n/a: %d keep-alive answers over the runs of shield/storm, %d needed", shS.PooledKAN, MinSamples(0.99))
		} else {
			q := float64(shQ.PooledKAP99)
			a := Ratio(float64(shS.PooledKAP99), q)
			b, c := Ratio(float64(noS.PooledKAP99), q), Ratio(float64(nfS.PooledKAP99), q)
			t.Got = fmt.Sprintf("shield %.2fx, none %.2fx, nftables %.2fx", a, b, c)
			t.Met, t.Judged = a <= 1.5 && b > 1.5 && c > 1.5, true
			t.Test = fmt.Sprintf("p99 of every run's answers pooled (n = %d, %d, %d, %d), against the thresholds; per-run samples are too small for a p99 and a test across runs", shQ.PooledKAN, shS.PooledKAN, noS.PooledKAN, nfS.PooledKAN)
		}
	}
	ts = append(ts, t)
	t = Target{Name: "datagram service under storm", Want: "shield: datagram p99 within e2e's budget (5x its quiet p99, at least 25 ms, at most 100 ms), success >= 99.9%"}
	if shS != nil && shQ != nil {
		if !shS.PooledUDPP99.OK() {
			t.Got = fmt.Sprintf("p99 n/a: %d datagram answers over the runs, %d needed; p50 %s ms", shS.PooledUDPN, MinSamples(0.99), Spread(shS.UDPP50, "%.2f"))
		} else {
			base := time.Duration(0)
			if shQ.PooledUDPP99.OK() {
				base = time.Duration(float64(shQ.PooledUDPP99) * 1e6)
			}
			limit := datagramBudget(base)
			t.Got = fmt.Sprintf("p99 %.2f ms against %.0f ms (quiet %s ms), p50 %s ms, success %.2f%%", float64(shS.PooledUDPP99), float64(limit)/1e6,
				FmtQ(shQ.PooledUDPP99, "%.2f", shQ.PooledUDPN), Spread(shS.UDPP50, "%.2f"), 100*shS.Success.Median)
			t.Met, t.Judged = float64(shS.PooledUDPP99) <= float64(limit)/1e6 && shS.Success.Median >= 0.999, true
			t.Test = fmt.Sprintf("p99 of every run's datagram answers pooled (n = %d) against the budget", shS.PooledUDPN)
		}
	}
	ts = append(ts, t)
	pr, prSh := get("probe", PhaseSaturation), get("shield+probe", PhaseSaturation)
	shSat := get("shield", PhaseSaturation)
	t = Target{Name: "probe cost", Want: "saturation throughput with the probe >= 95% of without (alone, and beside the shield)"}
	if pr != nil && noneSat != nil && prSh != nil && shSat != nil {
		a, b := Ratio(pr.RPS.Median, noneSat.RPS.Median), Ratio(prSh.RPS.Median, shSat.RPS.Median)
		t.Got = fmt.Sprintf("alone %.1f%%, beside the shield %.1f%%", 100*a, 100*b)
		t.judge(check{"alone", pr.Column(rps), noneSat.Column(rps), 0.95, false}, check{"beside the shield", prSh.Column(rps), shSat.Column(rps), 0.95, false})
	}
	ts = append(ts, t)
	return ts
}
