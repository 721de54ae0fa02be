package study

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/e2e"
	"github.com/xdpshield/xdpshield/internal/kernel"
	"github.com/xdpshield/xdpshield/probe"
	"github.com/xdpshield/xdpshield/shield"
)

// Results are a whole study, as written to results.json.
type Results struct {
	Started      time.Time     `json:"started"`
	Seconds      float64       `json:"seconds"`
	Command      string        `json:"command"`
	Kernel       string        `json:"kernel"`
	CPUModel     string        `json:"cpu_model"`
	Cores        int           `json:"cores"`
	Quick        bool          `json:"quick"`
	Runs         int           `json:"runs"`
	PhaseSeconds float64       `json:"phase_seconds"`
	DropSeconds  float64       `json:"drop_phase_seconds"`
	StormRate    uint64        `json:"storm_rate_pps"`
	Limits       shield.Limits `json:"limits"`
	LoadStart    string        `json:"loadavg_start"` // /proc/loadavg: the machine's load when the study began
	LoadEnd      string        `json:"loadavg_end"`
	Generator    string        `json:"generator"`
	RPS          bool          `json:"rps"`
	ProbeMode    string        `json:"probe_mode,omitempty"`
	Legit        []*Legit      `json:"legit"`
	Drop         []*Drop       `json:"drop_capacity"`
	Bench        []BenchRow    `json:"sim_bench"`
	BenchRaw     string        `json:"sim_bench_raw,omitempty"`
	Targets      []Target      `json:"targets"`
	Sections     []string      `json:"sections,omitempty"` // the sections run (empty: every one, as before -only)
	L7           *L7Results    `json:"l7_peers,omitempty"`
	Lists        *ListResults  `json:"lists,omitempty"`
	LB           *LBResults    `json:"xdplb,omitempty"`
	Notes        []string      `json:"notes"`
	Error        string        `json:"error,omitempty"`
}

// Stat is a median over runs with its spread.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func statOf(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// Spread is (max - min) / median, for the report.
func (s Stat) Spread() float64 {
	if s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Median
}

// Sample is one phase of one run.
type Sample struct {
	Run           int     `json:"run"`
	Seconds       float64 `json:"seconds"`
	Requests      int     `json:"requests"`
	Failures      int     `json:"failures"`
	RPS           float64 `json:"requests_per_second"` // successful
	KAP50         float64 `json:"keep_alive_p50_ms"`
	KAP99         float64 `json:"keep_alive_p99_ms"`
	KAP999        float64 `json:"keep_alive_p999_ms"`
	NewP50        float64 `json:"new_conn_p50_ms"`
	NewP99        float64 `json:"new_conn_p99_ms"`
	NewP999       float64 `json:"new_conn_p999_ms"`
	UDPP50        float64 `json:"datagram_p50_ms"`
	UDPP99        float64 `json:"datagram_p99_ms"`
	ServerCPU     float64 `json:"server_cpu_seconds"`
	SoftirqCPU    float64 `json:"softirq_cpu_seconds"`
	CPUPerReqUs   float64 `json:"cpu_per_request_us"` // (server + softirq) / successful requests
	ClientPPS     float64 `json:"client4_pps,omitempty"`
	ClientDropped uint64  `json:"client4_dropped,omitempty"`

	ka      []time.Duration
	Probe   *probe.Histogram `json:"-"` // every flow to the edge's port
	ProbeKA *probe.Histogram `json:"-"` // the keep-alive connections' flows
}

func sampleOf(s *e2e.Samples) Sample {
	var smp Sample
	if s == nil {
		return smp
	}
	smp.Seconds = s.End.Sub(s.Start).Seconds()
	ok := 0
	for k := range s.Lat {
		ok += len(s.Lat[k])
		smp.Failures += s.Fail[k]
	}
	smp.Requests = ok + smp.Failures
	if smp.Seconds > 0 {
		smp.RPS = float64(ok) / smp.Seconds
	}
	ka, nc := s.Lat[e2e.KeepAlive], s.Lat[e2e.NewConn]
	smp.KAP50, smp.KAP99, smp.KAP999 = msq(ka, 0.5), msq(ka, 0.99), msq(ka, 0.999)
	smp.NewP50, smp.NewP99, smp.NewP999 = msq(nc, 0.5), msq(nc, 0.99), msq(nc, 0.999)
	dg := s.Lat[e2e.Datagram]
	smp.UDPP50, smp.UDPP99 = msq(dg, 0.5), msq(dg, 0.99)
	smp.ka = slices.Clone(ka)
	return smp
}

func msq(d []time.Duration, q float64) float64 {
	return float64(e2e.Quantile(d, q)) / 1e6
}

// Legit is one configuration and phase over every run.
type Legit struct {
	Config  Config   `json:"config"`
	Phase   string   `json:"phase"`
	Samples []Sample `json:"runs"`
	RPS     Stat     `json:"requests_per_second"`
	KAP50   Stat     `json:"keep_alive_p50_ms"`
	KAP99   Stat     `json:"keep_alive_p99_ms"`
	KAP999  Stat     `json:"keep_alive_p999_ms"`
	NewP50  Stat     `json:"new_conn_p50_ms"`
	NewP99  Stat     `json:"new_conn_p99_ms"`
	UDPP50  Stat     `json:"datagram_p50_ms"`
	UDPP99  Stat     `json:"datagram_p99_ms"`
	CPUReq  Stat     `json:"cpu_per_request_us"`
	Success Stat     `json:"success"`
	// Every run's keep-alive latencies together, and the probe's
	// histograms summed: for the plots.
	pooled  []time.Duration
	probe   *probe.Histogram
	probeKA *probe.Histogram
	// The probe's quantiles over every run, beside the client's.
	ProbeP50   float64 `json:"probe_p50_ms,omitempty"`
	ProbeP99   float64 `json:"probe_p99_ms,omitempty"`
	ProbeN     uint64  `json:"probe_timed,omitempty"`
	ProbeKAP50 float64 `json:"probe_keep_alive_p50_ms,omitempty"`
	ProbeKAP99 float64 `json:"probe_keep_alive_p99_ms,omitempty"`
	ProbeKAN   uint64  `json:"probe_keep_alive_timed,omitempty"`
}

// DropSample is one drop-capacity measurement.
type DropSample struct {
	Run            int     `json:"run"`
	Seconds        float64 `json:"seconds"`
	Sent           uint64  `json:"sent"`
	Refused        uint64  `json:"refused_by_link"` // storm0 tx_dropped: the edge never saw them
	Seen           uint64  `json:"seen"`
	Dropped        uint64  `json:"dropped"`
	Passed         uint64  `json:"passed"`
	Tracked        int     `json:"sources_tracked"`
	SeenPPS        float64 `json:"seen_pps"`
	DropPPS        float64 `json:"drop_pps"`
	SoftirqCPU     float64 `json:"softirq_cpu_seconds"`
	BusyCPU        float64 `json:"busy_cpu_seconds"`
	DropsPerCPUSec float64 `json:"drops_per_softirq_cpu_second"`
}

// Drop is one drop-capacity point over every run.
type Drop struct {
	Target  string       `json:"target"`
	Sources string       `json:"sources"`
	Samples []DropSample `json:"runs"`
	SeenPPS Stat         `json:"seen_pps"`
	DropPPS Stat         `json:"drop_pps"`
	PerCPU  Stat         `json:"drops_per_softirq_cpu_second"`
	Passed  Stat         `json:"passed"`
	Tracked Stat         `json:"sources_tracked"`
}

// Target is one of the targets and where it landed.
type Target struct {
	Name   string `json:"name"`
	Want   string `json:"want"`
	Got    string `json:"got"`
	Met    bool   `json:"met"`
	Judged bool   `json:"judged"` // false: a figure it needs is missing
}

func newResults(opt Options) *Results {
	return &Results{
		Started:      time.Now().UTC(),
		Command:      opt.Command,
		Kernel:       kernel.Release(),
		CPUModel:     cpuModel(),
		Cores:        runtime.NumCPU(),
		Quick:        opt.Quick,
		Runs:         opt.Runs,
		PhaseSeconds: opt.Phase.Seconds(),
		DropSeconds:  opt.DropPhase.Seconds(),
		StormRate:    opt.StormRate,
		Limits:       Limits(),
		LoadStart:    loadavg(),
	}
}

// loadavg is the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func (r *Results) legit(name, phase string) *Legit {
	for _, l := range r.Legit {
		if l.Config.Name == name && l.Phase == phase {
			return l
		}
	}
	return nil
}

func (r *Results) addLegit(c Config, phase string, s Sample) {
	l := r.legit(c.Name, phase)
	if l == nil {
		l = &Legit{Config: c, Phase: phase}
		r.Legit = append(r.Legit, l)
	}
	l.pooled = append(l.pooled, s.ka...)
	if s.Probe != nil {
		if l.probe == nil {
			l.probe = new(probe.Histogram)
		}
		l.probe.Add(s.Probe)
	}
	if s.ProbeKA != nil {
		if l.probeKA == nil {
			l.probeKA = new(probe.Histogram)
		}
		l.probeKA.Add(s.ProbeKA)
	}
	l.Samples = append(l.Samples, s)
}

func (r *Results) drop(target, sources string) *Drop {
	for _, d := range r.Drop {
		if d.Target == target && d.Sources == sources {
			return d
		}
	}
	return nil
}

func (r *Results) addDrop(target, sources string, s DropSample) {
	d := r.drop(target, sources)
	if d == nil {
		d = &Drop{Target: target, Sources: sources}
		r.Drop = append(r.Drop, d)
	}
	d.Samples = append(d.Samples, s)
}

// finish computes the medians, spreads and targets.
func (r *Results) finish() {
	r.Seconds = time.Since(r.Started).Seconds()
	r.LoadEnd = loadavg()
	for _, l := range r.Legit {
		col := func(f func(Sample) float64) Stat {
			var xs []float64
			for _, s := range l.Samples {
				xs = append(xs, f(s))
			}
			return statOf(xs)
		}
		l.RPS = col(func(s Sample) float64 { return s.RPS })
		l.KAP50 = col(func(s Sample) float64 { return s.KAP50 })
		l.KAP99 = col(func(s Sample) float64 { return s.KAP99 })
		l.KAP999 = col(func(s Sample) float64 { return s.KAP999 })
		l.NewP50 = col(func(s Sample) float64 { return s.NewP50 })
		l.NewP99 = col(func(s Sample) float64 { return s.NewP99 })
		l.UDPP50 = col(func(s Sample) float64 { return s.UDPP50 })
		l.UDPP99 = col(func(s Sample) float64 { return s.UDPP99 })
		l.CPUReq = col(func(s Sample) float64 { return s.CPUPerReqUs })
		l.Success = col(func(s Sample) float64 {
			if s.Requests == 0 {
				return 0
			}
			return float64(s.Requests-s.Failures) / float64(s.Requests)
		})
		if l.probe != nil {
			l.ProbeN = l.probe.Count()
			l.ProbeP50 = float64(l.probe.Quantile(0.5)) / 1e6
			l.ProbeP99 = float64(l.probe.Quantile(0.99)) / 1e6
		}
		if l.probeKA != nil {
			l.ProbeKAN = l.probeKA.Count()
			l.ProbeKAP50 = float64(l.probeKA.Quantile(0.5)) / 1e6
			l.ProbeKAP99 = float64(l.probeKA.Quantile(0.99)) / 1e6
		}
	}
	for _, d := range r.Drop {
		col := func(f func(DropSample) float64) Stat {
			var xs []float64
			for _, s := range d.Samples {
				xs = append(xs, f(s))
			}
			return statOf(xs)
		}
		d.SeenPPS = col(func(s DropSample) float64 { return s.SeenPPS })
		d.DropPPS = col(func(s DropSample) float64 { return s.DropPPS })
		d.PerCPU = col(func(s DropSample) float64 { return s.DropsPerCPUSec })
		d.Passed = col(func(s DropSample) float64 { return float64(s.Passed) })
		d.Tracked = col(func(s DropSample) float64 { return float64(s.Tracked) })
	}
	r.Targets = r.targets()
	if r.L7 != nil {
		r.L7.finish()
	}
	if r.Lists != nil {
		r.Lists.finish()
	}
	if r.LB != nil {
		r.LB.finish()
	}
}

// ran reports whether section was run.
func (r *Results) ran(section string) bool {
	return len(r.Sections) == 0 && section == SectionMain || slices.Contains(r.Sections, section)
}

// Missing lists the configurations, phases and drop points that produced
// no numbers: what -quick checks.
func (r *Results) Missing() []string {
	var out []string
	if r.ran(SectionPeers) {
		out = append(out, r.L7.missing()...)
	}
	if r.ran(SectionLists) {
		out = append(out, r.Lists.missing()...)
	}
	if r.ran(SectionXDPLB) {
		out = append(out, r.LB.missing()...)
	}
	if !r.ran(SectionMain) {
		return out
	}
	for _, c := range Configs {
		for _, ph := range []string{PhaseFixed, PhaseSaturation} {
			l := r.legit(c.Name, ph)
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
			d := r.drop(t, src)
			switch {
			case d == nil || len(d.Samples) == 0:
				out = append(out, "drop capacity "+t+"/"+src+": not measured")
			case d.SeenPPS.Median <= 0:
				out = append(out, "drop capacity "+t+"/"+src+": no frame reached the edge")
			case d.DropPPS.Median <= 0:
				out = append(out, "drop capacity "+t+"/"+src+": nothing dropped")
			}
		}
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (r *Results) targets() []Target {
	var ts []Target
	get := func(name, ph string) *Legit { return r.legit(name, ph) }
	none, noneSat := get("none", PhaseFixed), get("none", PhaseSaturation)
	for _, pass := range []string{"shield-dryrun", "shield-allowall"} {
		l, sat := get(pass, PhaseFixed), get(pass, PhaseSaturation)
		t := Target{Name: pass + " passing everything", Want: "saturation throughput >= 97% of no program, keep-alive p50 within 5%"}
		if l != nil && sat != nil && none != nil && noneSat != nil {
			tp := ratio(sat.RPS.Median, noneSat.RPS.Median)
			p50 := ratio(l.KAP50.Median, none.KAP50.Median)
			t.Got = fmt.Sprintf("throughput %.1f%%, p50 %.2fx", 100*tp, p50)
			t.Met, t.Judged = tp >= 0.97 && p50 <= 1.05, true
		}
		ts = append(ts, t)
	}
	fl, sh, nf := r.drop("floor", "few"), r.drop("shield", "few"), r.drop("nft", "few")
	t := Target{Name: "drop capacity, few sources", Want: "shield >= 80% of the XDP_DROP floor and >= 3x nftables (frames/s at the edge)"}
	if fl != nil && sh != nil && nf != nil {
		a, b := ratio(sh.DropPPS.Median, fl.DropPPS.Median), ratio(sh.DropPPS.Median, nf.DropPPS.Median)
		t.Got = fmt.Sprintf("%.0f%% of the floor, %.1fx nftables", 100*a, b)
		if np := r.drop("shield-nopass", "few"); np != nil {
			t.Got += fmt.Sprintf(" (passing almost nothing: %.0f%% of the floor)", 100*ratio(np.DropPPS.Median, fl.DropPPS.Median))
		}
		t.Met, t.Judged = a >= 0.8 && b >= 3, true
	}
	ts = append(ts, t)
	shQ, shS := get("shield", PhaseFixed), get("shield/storm", PhaseFixed)
	noS, nfS := get("none/storm", PhaseFixed), get("nft/storm", PhaseFixed)
	t = Target{Name: "legitimate p99 under storm", Want: "shield <= 1.5x its no-storm p99 (keep-alive); no protection and nftables above it"}
	if shQ != nil && shS != nil && noS != nil && nfS != nil {
		a := ratio(shS.KAP99.Median, shQ.KAP99.Median)
		b, c := ratio(noS.KAP99.Median, shQ.KAP99.Median), ratio(nfS.KAP99.Median, shQ.KAP99.Median)
		t.Got = fmt.Sprintf("shield %.2fx, none %.2fx, nftables %.2fx", a, b, c)
		t.Met, t.Judged = a <= 1.5 && b > 1.5 && c > 1.5, true
	}
	ts = append(ts, t)
	pr, prSh := get("probe", PhaseSaturation), get("shield+probe", PhaseSaturation)
	shSat := get("shield", PhaseSaturation)
	t = Target{Name: "probe cost", Want: "saturation throughput with the probe >= 95% of without (alone, and beside the shield)"}
	if pr != nil && noneSat != nil && prSh != nil && shSat != nil {
		a, b := ratio(pr.RPS.Median, noneSat.RPS.Median), ratio(prSh.RPS.Median, shSat.RPS.Median)
		t.Got = fmt.Sprintf("alone %.1f%%, beside the shield %.1f%%", 100*a, 100*b)
		t.Met, t.Judged = a >= 0.95 && b >= 0.95, true
	}
	ts = append(ts, t)
	return ts
}
