package results

import (
	"fmt"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/probe"
	"github.com/xdpshield/xdpshield/shield/config"
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
	Limits       config.Limits `json:"limits"`
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

// StatBy is StatOf of f over samples: one figure of each run.
func StatBy[S any](samples []S, f func(S) float64) Stat {
	xs := make([]float64, 0, len(samples))
	for _, s := range samples {
		xs = append(xs, f(s))
	}
	return StatOf(xs)
}

// StatOf is the median and range of xs; missing figures (NaN) are left
// out, and N counts the rest.
func StatOf(xs []float64) Stat {
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

	// Every answer's latency, by kind: for the pooled tails.
	KALat, NewLat, UDPLat []time.Duration  `json:"-"`
	Probe                 *probe.Histogram `json:"-"` // every flow to the edge's port
	ProbeKA               *probe.Histogram `json:"-"` // the keep-alive connections' flows
}

func SampleOf(s *parts.Samples) Sample {
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
	smp.KAP50, smp.KAP99, smp.KAP999 = QuantileMs(ka, 0.5), QuantileMs(ka, 0.99), QuantileMs(ka, 0.999)
	smp.NewP50, smp.NewP99, smp.NewP999 = QuantileMs(nc, 0.5), QuantileMs(nc, 0.99), QuantileMs(nc, 0.999)
	smp.UDPP50, smp.UDPP99 = QuantileMs(dg, 0.5), QuantileMs(dg, 0.99)
	smp.KAN, smp.NewN, smp.UDPN = len(ka), len(nc), len(dg)
	smp.KALat, smp.NewLat, smp.UDPLat = slices.Clone(ka), slices.Clone(nc), slices.Clone(dg)
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
	PooledKA, PooledNewConn, PooledDatagram []time.Duration  `json:"-"`
	ProbeHist                               *probe.Histogram `json:"-"`
	ProbeKAHist                             *probe.Histogram `json:"-"`
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

// revision is the git revision the binary was built from (Go's build
// info: vcs.revision, vcs.modified), else the working tree's (git
// describe), else "".
func Revision() string {
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
func LoadAvg() string {
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
func CPUModel() string {
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

func (r *Results) LegitOf(name, phase string) *Legit {
	for _, l := range r.Legit {
		if l.Config.Name == name && l.Phase == phase {
			return l
		}
	}
	return nil
}

func (r *Results) AddLegit(c Config, phase string, s Sample) {
	l := r.LegitOf(c.Name, phase)
	if l == nil {
		l = &Legit{Config: c, Phase: phase}
		r.Legit = append(r.Legit, l)
	}
	l.PooledKA = append(l.PooledKA, s.KALat...)
	l.PooledNewConn = append(l.PooledNewConn, s.NewLat...)
	l.PooledDatagram = append(l.PooledDatagram, s.UDPLat...)
	if s.Probe != nil {
		if l.ProbeHist == nil {
			l.ProbeHist = new(probe.Histogram)
		}
		l.ProbeHist.Add(s.Probe)
	}
	if s.ProbeKA != nil {
		if l.ProbeKAHist == nil {
			l.ProbeKAHist = new(probe.Histogram)
		}
		l.ProbeKAHist.Add(s.ProbeKA)
	}
	l.Samples = append(l.Samples, s)
}

func (r *Results) DropOf(target, sources string) *Drop {
	for _, d := range r.Drop {
		if d.Target == target && d.Sources == sources {
			return d
		}
	}
	return nil
}

func (r *Results) AddDrop(target, sources string, s DropSample) {
	d := r.DropOf(target, sources)
	if d == nil {
		d = &Drop{Target: target, Sources: sources}
		r.Drop = append(r.Drop, d)
	}
	d.Samples = append(d.Samples, s)
}

// finish computes the medians, spreads and targets.
func (r *Results) Finish() {
	r.Seconds = time.Since(r.Started).Seconds()
	r.LoadEnd = LoadAvg()
	for _, l := range r.Legit {
		col := func(f func(Sample) float64) Stat { return StatBy(l.Samples, f) }
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
		if l.ProbeHist != nil {
			l.ProbeN = l.ProbeHist.Count()
			l.ProbeP50 = float64(l.ProbeHist.Quantile(0.5)) / 1e6
			l.ProbeP99 = float64(l.ProbeHist.Quantile(0.99)) / 1e6
		}
		if l.ProbeKAHist != nil {
			l.ProbeKAN = l.ProbeKAHist.Count()
			l.ProbeKAP50 = float64(l.ProbeKAHist.Quantile(0.5)) / 1e6
			l.ProbeKAP99 = float64(l.ProbeKAHist.Quantile(0.99)) / 1e6
		}
	}
	for _, d := range r.Drop {
		col := func(f func(DropSample) float64) Stat { return StatBy(d.Samples, f) }
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
		r.L7.Finish()
	}
	if r.Lists != nil {
		r.Lists.Finish()
	}
	if r.LB != nil {
		r.LB.Finish()
	}
}

// ran reports whether section was run.
func (r *Results) Ran(section string) bool {
	return len(r.Sections) == 0 && section == SectionMain || slices.Contains(r.Sections, section)
}

// pool computes the tails over every run's answers together.
func (l *Legit) pool() {
	l.PooledKAN, l.PooledNewN, l.PooledUDPN = len(l.PooledKA), len(l.PooledNewConn), len(l.PooledDatagram)
	l.PooledKAP99, l.PooledKAP999 = QuantileMs(l.PooledKA, 0.99), QuantileMs(l.PooledKA, 0.999)
	l.PooledNewP99 = QuantileMs(l.PooledNewConn, 0.99)
	l.PooledUDPP99, l.PooledUDPP999 = QuantileMs(l.PooledDatagram, 0.99), QuantileMs(l.PooledDatagram, 0.999)
}

// column is the figure f of every run.
func (l *Legit) Column(f func(Sample) float64) []float64 {
	var xs []float64
	for _, s := range l.Samples {
		xs = append(xs, f(s))
	}
	return xs
}

// rates fills the per-second figures from the counts.
func (d *DropSample) Rates() {
	d.SentPPS = float64(d.Sent) / d.Seconds
	d.SeenPPS = float64(d.Seen) / d.Seconds
	d.DropPPS = float64(d.Dropped) / d.Seconds
	if d.SoftirqCPU > 0 {
		d.DropsPerCPUSec = float64(d.Dropped) / d.SoftirqCPU
	}
}
