package study

import (
	"fmt"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/internal/kernel"
	"github.com/xdpshield/xdpshield/probe"
	"github.com/xdpshield/xdpshield/shield"
)

// Results are a whole study, as written to results.json.
type Results struct {
	Started      time.Time     `json:"started"`
	Seconds      float64       `json:"seconds"`
	Command      string        `json:"command"`
	Revision     string        `json:"revision"` // xdpshield's git revision (+dirty), as built or as the tree holds it
	Kernel       string        `json:"kernel"`
	CPUModel     string        `json:"cpu_model"`
	Cores        int           `json:"cores"`
	Quick        bool          `json:"quick"`
	Runs         int           `json:"runs"`
	PhaseSeconds float64       `json:"phase_seconds"`
	DropSeconds  float64       `json:"drop_phase_seconds"`
	StormRate    uint64        `json:"storm_rate_pps"`
	Limits       shield.Limits `json:"limits"`
	Defaults     Defaults      `json:"defaults"`          // what Limits were derived from (StudyDefaults)
	Derived      *Defaults     `json:"derived,omitempty"` // derived again from this run's data
	LoadStart    string        `json:"loadavg_start"`     // /proc/loadavg: the machine's load when the study began
	LoadEnd      string        `json:"loadavg_end"`
	Generator    string        `json:"generator"`
	RPS          bool          `json:"rps"`
	ProbeMode    string        `json:"probe_mode,omitempty"`
	Legit        []*Legit      `json:"legit"`
	Drop         []*Drop       `json:"drop_capacity"`
	Bench        []BenchRow    `json:"sim_bench"`
	BenchRaw     string        `json:"sim_bench_raw,omitempty"`
	Live         []LiveRow     `json:"live_path,omitempty"` // the drop capacity's few sources as make bench shows them
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

// statOf is the median and range of xs; missing figures (NaN) are left
// out, and N counts the rest.
func statOf(xs []float64) Stat {
	s := valid(xs)
	if len(s) == 0 {
		return Stat{}
	}
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
	Run      int     `json:"run"`
	Seconds  float64 `json:"seconds"`
	Requests int     `json:"requests"`
	Failures int     `json:"failures"`
	RPS      float64 `json:"requests_per_second"` // successful
	// Quantiles in ms, null (missing) where the run's sample is under
	// MinSamples: p50 20, p99 1,000, p99.9 10,000 answers.
	KAP50         Q       `json:"keep_alive_p50_ms"`
	KAP99         Q       `json:"keep_alive_p99_ms"`
	KAP999        Q       `json:"keep_alive_p999_ms"`
	NewP50        Q       `json:"new_conn_p50_ms"`
	NewP99        Q       `json:"new_conn_p99_ms"`
	NewP999       Q       `json:"new_conn_p999_ms"`
	UDPP50        Q       `json:"datagram_p50_ms"`
	UDPP99        Q       `json:"datagram_p99_ms"`
	KAN           int     `json:"keep_alive_answered"`
	NewN          int     `json:"new_conn_answered"`
	UDPN          int     `json:"datagram_answered"`
	ServerCPU     float64 `json:"server_cpu_seconds"`
	SoftirqCPU    float64 `json:"softirq_cpu_seconds"`
	CPUPerReqUs   float64 `json:"cpu_per_request_us"` // (server + softirq) / successful requests
	ClientPPS     float64 `json:"client4_pps,omitempty"`
	ClientDropped uint64  `json:"client4_dropped,omitempty"`

	ka, nc, dg []time.Duration
	Probe      *probe.Histogram `json:"-"` // every flow to the edge's port
	ProbeKA    *probe.Histogram `json:"-"` // the keep-alive connections' flows
}

func sampleOf(s *parts.Samples) Sample {
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
	ka, nc, dg := s.Lat[parts.KeepAlive], s.Lat[parts.NewConn], s.Lat[parts.Datagram]
	smp.KAP50, smp.KAP99, smp.KAP999 = quantileMs(ka, 0.5), quantileMs(ka, 0.99), quantileMs(ka, 0.999)
	smp.NewP50, smp.NewP99, smp.NewP999 = quantileMs(nc, 0.5), quantileMs(nc, 0.99), quantileMs(nc, 0.999)
	smp.UDPP50, smp.UDPP99 = quantileMs(dg, 0.5), quantileMs(dg, 0.99)
	smp.KAN, smp.NewN, smp.UDPN = len(ka), len(nc), len(dg)
	smp.ka, smp.nc, smp.dg = slices.Clone(ka), slices.Clone(nc), slices.Clone(dg)
	return smp
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
	// The tail over every run's answers together (pooled), null where
	// they are under MinSamples; n: how many.
	PooledKAP99   Q   `json:"pooled_keep_alive_p99_ms"`
	PooledKAP999  Q   `json:"pooled_keep_alive_p999_ms"`
	PooledNewP99  Q   `json:"pooled_new_conn_p99_ms"`
	PooledUDPP99  Q   `json:"pooled_datagram_p99_ms"`
	PooledUDPP999 Q   `json:"pooled_datagram_p999_ms"`
	PooledKAN     int `json:"pooled_keep_alive_answered"`
	PooledNewN    int `json:"pooled_new_conn_answered"`
	PooledUDPN    int `json:"pooled_datagram_answered"`
	// Every run's latencies together, and the probe's histograms
	// summed: for the plots and the pooled tails.
	pooled, pooledNew, pooledUDP []time.Duration
	probe                        *probe.Histogram
	probeKA                      *probe.Histogram
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
	SentPPS        float64 `json:"sent_pps"` // the generator's rate in this phase
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
	SentPPS Stat         `json:"sent_pps"`
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
	// Bound says why the figures measure the generator rather than the
	// receiver ("" when they do not): the target is then neither met
	// nor missed.
	Bound string `json:"generator_bound,omitempty"`
	// Undecided: the runs do not separate from the target's thresholds,
	// so they carry neither met nor missed. Test names the test.
	Undecided bool   `json:"undecided,omitempty"`
	Test      string `json:"test,omitempty"`
}

// LiveFrames is the name of the generator the drop capacity needs.
const LiveFrames = "xdp-live-frames"

// GeneratorMargin is how many times the XDP_DROP floor's rate the
// generator alone must send for the floor to be the receiver's: below it
// the ratios to the floor measure the generator.
const GeneratorMargin = 1.5

// GeneratorBound says why the drop-capacity figures from sources are set
// by the generator rather than by the receiver, or "" when they are not.
func (r *Results) GeneratorBound(sources string) string {
	if r.Generator != LiveFrames {
		return fmt.Sprintf("generator-bound: the storm generator is %s, not %s (BPF_F_TEST_XDP_LIVE_FRAMES needs kernel 5.18+; this one is %s): it sets every rate", r.Generator, LiveFrames, r.Kernel)
	}
	g, fl := r.drop("generator", sources), r.drop("floor", sources)
	if g == nil || fl == nil || g.SentPPS.N == 0 || fl.DropPPS.N == 0 {
		return "generator-bound: the generator's own rate or the floor was not measured, so nothing says the floor is the receiver's"
	}
	if x := ratio(g.SentPPS.Median, fl.DropPPS.Median); x < GeneratorMargin {
		return fmt.Sprintf("generator-bound: the generator alone sent %s Mpps, only %.2fx the XDP_DROP floor's %s (wanted >= %.1fx)", mpps(g.SentPPS.Median), x, mpps(fl.DropPPS.Median), GeneratorMargin)
	}
	return ""
}

// OverGenerator is the nanoseconds per frame target d adds to the
// generator alone: the veth runs the receiver's XDP program in NAPI on
// the core that sent the frame, so the two costs add up on one core.
func (r *Results) OverGenerator(d *Drop) (float64, bool) {
	g := r.drop("generator", d.Sources)
	if g == nil || g.SentPPS.Median <= 0 || d.SentPPS.Median <= 0 {
		return 0, false
	}
	return 1e9/d.SentPPS.Median - 1e9/g.SentPPS.Median, true
}

func newResults(opt Options) *Results {
	return &Results{
		Started:      time.Now().UTC(),
		Command:      opt.Command,
		Revision:     revision(),
		Kernel:       kernel.Release(),
		CPUModel:     cpuModel(),
		Cores:        runtime.NumCPU(),
		Quick:        opt.Quick,
		Runs:         opt.Runs,
		PhaseSeconds: opt.Phase.Seconds(),
		DropSeconds:  opt.DropPhase.Seconds(),
		StormRate:    opt.StormRate,
		Limits:       Limits(),
		Defaults:     StudyDefaults(),
		LoadStart:    loadavg(),
	}
}

// revision is the git revision the binary was built from (Go's build
// info: vcs.revision, vcs.modified), else the working tree's (git
// describe), else "".
func revision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
		if rev != "" {
			return rev + dirty
		}
	}
	out, err := exec.Command("git", "describe", "--always", "--dirty=+dirty", "--abbrev=40").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// loadavg is the 1, 5 and 15 minute load averages, as /proc/loadavg
// writes them (prometheus/procfs reads it).
func loadavg() string {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return "unknown"
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", l.Load1, l.Load5, l.Load15)
}

// cpuModel is the first CPU's model name from /proc/cpuinfo.
func cpuModel() string {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return "unknown"
	}
	cs, err := fs.CPUInfo()
	if err != nil || len(cs) == 0 || cs[0].ModelName == "" {
		return "unknown"
	}
	return cs[0].ModelName
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
	l.pooledNew = append(l.pooledNew, s.nc...)
	l.pooledUDP = append(l.pooledUDP, s.dg...)
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
		l.KAP50 = col(func(s Sample) float64 { return float64(s.KAP50) })
		l.KAP99 = col(func(s Sample) float64 { return float64(s.KAP99) })
		l.KAP999 = col(func(s Sample) float64 { return float64(s.KAP999) })
		l.NewP50 = col(func(s Sample) float64 { return float64(s.NewP50) })
		l.NewP99 = col(func(s Sample) float64 { return float64(s.NewP99) })
		l.UDPP50 = col(func(s Sample) float64 { return float64(s.UDPP50) })
		l.UDPP99 = col(func(s Sample) float64 { return float64(s.UDPP99) })
		l.CPUReq = col(func(s Sample) float64 { return s.CPUPerReqUs })
		l.Success = col(func(s Sample) float64 {
			if s.Requests == 0 {
				return 0
			}
			return float64(s.Requests-s.Failures) / float64(s.Requests)
		})
		l.pool()
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
		d.SentPPS = col(func(s DropSample) float64 { return s.SentPPS })
		d.SeenPPS = col(func(s DropSample) float64 { return s.SeenPPS })
		d.DropPPS = col(func(s DropSample) float64 { return s.DropPPS })
		d.PerCPU = col(func(s DropSample) float64 { return s.DropsPerCPUSec })
		d.Passed = col(func(s DropSample) float64 { return float64(s.Passed) })
		d.Tracked = col(func(s DropSample) float64 { return float64(s.Tracked) })
	}
	r.Derived = r.derive()
	if r.Live == nil {
		r.Live = liveOf(r)
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

// derive derives the defaults again from this run: the paced client's
// packets/s through the quiet shield, and its quiet datagram p99.
func (r *Results) derive() *Defaults {
	q := r.legit("shield", PhaseFixed)
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
	d := Derive(statOf(pps).Median, capacity, datagramBudget(base))
	return &d
}

// stormUDP is the most UDP packets/s the study's few-source storm passes
// at a per-source rate: 32 sources, and storm.Run sends each tick's UDP
// first, so nearly all a source passes is UDP.
func stormUDP(rate uint64) float64 { return 32 * float64(rate) }

// pool computes the tails over every run's answers together.
func (l *Legit) pool() {
	l.PooledKAN, l.PooledNewN, l.PooledUDPN = len(l.pooled), len(l.pooledNew), len(l.pooledUDP)
	l.PooledKAP99, l.PooledKAP999 = quantileMs(l.pooled, 0.99), quantileMs(l.pooled, 0.999)
	l.PooledNewP99 = quantileMs(l.pooledNew, 0.99)
	l.PooledUDPP99, l.PooledUDPP999 = quantileMs(l.pooledUDP, 0.99), quantileMs(l.pooledUDP, 0.999)
}

// column is the figure f of every run.
func (l *Legit) column(f func(Sample) float64) []float64 {
	var xs []float64
	for _, s := range l.Samples {
		xs = append(xs, f(s))
	}
	return xs
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

func ratio(a, b float64) float64 {
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
		ma, mb := statOf(a).Median, statOf(kb).Median
		ok := ma >= mb
		if c.atMost {
			ok = ma <= mb
		}
		sep, test := differ(a, kb)
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
	get := func(name, ph string) *Legit { return r.legit(name, ph) }
	rps := func(s Sample) float64 { return s.RPS }
	kap50 := func(s Sample) float64 { return float64(s.KAP50) }
	none, noneSat := get("none", PhaseFixed), get("none", PhaseSaturation)
	for _, pass := range []string{"shield-dryrun", "shield-allowall"} {
		l, sat := get(pass, PhaseFixed), get(pass, PhaseSaturation)
		t := Target{Name: pass + " passing everything", Want: "saturation throughput >= 97% of no program, keep-alive p50 within 5%"}
		if l != nil && sat != nil && none != nil && noneSat != nil {
			tp := ratio(sat.RPS.Median, noneSat.RPS.Median)
			p50 := ratio(l.KAP50.Median, none.KAP50.Median)
			t.Got = fmt.Sprintf("throughput %.1f%%, p50 %.2fx", 100*tp, p50)
			t.judge(check{"throughput", sat.column(rps), noneSat.column(rps), 0.97, false},
				check{"p50", l.column(kap50), none.column(kap50), 1.05, true})
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
		fl, sh, nf := r.drop("floor", dt.sources), r.drop("shield", dt.sources), r.drop("nft", dt.sources)
		t := Target{Name: dt.name, Want: fmt.Sprintf("shield >= %.0f%% of the XDP_DROP floor and >= 3x nftables (frames/s at the edge), the generator alone >= %.1fx the floor", 100*dt.least, GeneratorMargin)}
		if fl != nil && sh != nil && nf != nil {
			a, b := ratio(sh.DropPPS.Median, fl.DropPPS.Median), ratio(sh.DropPPS.Median, nf.DropPPS.Median)
			t.Got = fmt.Sprintf("%.0f%% of the floor, %.1fx nftables", 100*a, b)
			if g := r.drop("generator", dt.sources); g != nil {
				t.Got += fmt.Sprintf("; generator %s Mpps = %.2fx the floor", mpps(g.SentPPS.Median), ratio(g.SentPPS.Median, fl.DropPPS.Median))
			}
			if np := r.drop("shield-nopass", dt.sources); np != nil {
				t.Got += fmt.Sprintf(" (passing almost nothing: %.0f%% of the floor)", 100*ratio(np.DropPPS.Median, fl.DropPPS.Median))
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
			a := ratio(float64(shS.PooledKAP99), q)
			b, c := ratio(float64(noS.PooledKAP99), q), ratio(float64(nfS.PooledKAP99), q)
			t.Got = fmt.Sprintf("shield %.2fx, none %.2fx, nftables %.2fx", a, b, c)
			t.Met, t.Judged = a <= 1.5 && b > 1.5 && c > 1.5, true
			t.Test = fmt.Sprintf("p99 of every run's answers pooled (n = %d, %d, %d, %d), against the thresholds; per-run samples are too small for a p99 and a test across runs", shQ.PooledKAN, shS.PooledKAN, noS.PooledKAN, nfS.PooledKAN)
		}
	}
	ts = append(ts, t)
	t = Target{Name: "datagram service under storm", Want: "shield: datagram p99 within e2e's budget (5x its quiet p99, at least 25 ms, at most 100 ms), success >= 99.9%"}
	if shS != nil && shQ != nil {
		if !shS.PooledUDPP99.OK() {
			t.Got = fmt.Sprintf("p99 n/a: %d datagram answers over the runs, %d needed; p50 %s ms", shS.PooledUDPN, MinSamples(0.99), spread(shS.UDPP50, "%.2f"))
		} else {
			base := time.Duration(0)
			if shQ.PooledUDPP99.OK() {
				base = time.Duration(float64(shQ.PooledUDPP99) * 1e6)
			}
			limit := datagramBudget(base)
			t.Got = fmt.Sprintf("p99 %.2f ms against %.0f ms (quiet %s ms), p50 %s ms, success %.2f%%", float64(shS.PooledUDPP99), float64(limit)/1e6,
				fmtQ(shQ.PooledUDPP99, "%.2f", shQ.PooledUDPN), spread(shS.UDPP50, "%.2f"), 100*shS.Success.Median)
			t.Met, t.Judged = float64(shS.PooledUDPP99) <= float64(limit)/1e6 && shS.Success.Median >= 0.999, true
			t.Test = fmt.Sprintf("p99 of every run's datagram answers pooled (n = %d) against the budget", shS.PooledUDPN)
		}
	}
	ts = append(ts, t)
	pr, prSh := get("probe", PhaseSaturation), get("shield+probe", PhaseSaturation)
	shSat := get("shield", PhaseSaturation)
	t = Target{Name: "probe cost", Want: "saturation throughput with the probe >= 95% of without (alone, and beside the shield)"}
	if pr != nil && noneSat != nil && prSh != nil && shSat != nil {
		a, b := ratio(pr.RPS.Median, noneSat.RPS.Median), ratio(prSh.RPS.Median, shSat.RPS.Median)
		t.Got = fmt.Sprintf("alone %.1f%%, beside the shield %.1f%%", 100*a, 100*b)
		t.judge(check{"alone", pr.column(rps), noneSat.column(rps), 0.95, false}, check{"beside the shield", prSh.column(rps), shSat.column(rps), 0.95, false})
	}
	ts = append(ts, t)
	return ts
}
