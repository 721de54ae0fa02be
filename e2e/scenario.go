package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"xdpshield/internal/kernel"
	"xdpshield/shield"
)

// Log attribute keys.
const (
	logPhase    = "phase"
	logErr      = "err"
	logDev      = "dev"
	logNS       = "namespaces"
	logRequests = "requests"
	logSent     = "sent"
)

// Budget is what the legitimate client must keep during a storm.
type Budget struct {
	// P99Ratio bounds a storm phase's p99 as a multiple of the baseline
	// p99 measured in the same run (per request kind).
	P99Ratio float64 `json:"p99_ratio"`
	// P99Floor is the least baseline the ratio is applied to, per request
	// kind: a baseline p99 of 1 ms on an idle box would make the budget a
	// few scheduler ticks. P99FloorKeep is the floor of one round trip:
	// a kept-alive request, a datagram request.
	P99Floor     time.Duration `json:"p99_floor_new_conn_ns"`
	P99FloorKeep time.Duration `json:"p99_floor_keep_alive_ns"`
	// P99Cap bounds a storm phase's p99 absolutely, whatever the baseline;
	// 0: no cap, the ratio alone (emulated CPUs, where absolute time means
	// nothing).
	P99Cap time.Duration `json:"p99_cap_ns"`
	// MinSuccess is the least share of legitimate requests that succeed.
	MinSuccess float64 `json:"min_success"`
}

// DefaultBudget, from demo runs on this 2-core box while qemu VMs and
// compiles of the other suites ran beside it (one core busy with qemu
// alone): baselines were 5-26 ms p99 for a request on a new TLS connection
// and 1-4 ms kept alive. With the shield, storm phases reached 11-82 ms
// (new) and 3-8 ms (kept alive); with no program attached the same storms
// reached 18-381 ms and 5-98 ms; a phase with no storm at all (recovery) hit
// 40-75 ms on new connections now and then, a neighbour's doing. So: 5x the
// baseline p99, the baseline floored at 20 ms for a new connection (a TLS
// handshake is two round trips and half a dozen wake-ups, each exposed to a
// neighbour's time slice: on this box its budget is in effect the cap) and
// at 5 ms kept alive (one round trip: this is the discriminating budget),
// capped at 100 ms absolute (a lost SYN costs 1 s, a lost segment 200 ms or
// more: caught whatever the baseline). Success at least 99.9%, as the issue
// asks.
func DefaultBudget() Budget {
	return Budget{P99Ratio: 5, P99Floor: 20 * time.Millisecond, P99FloorKeep: 5 * time.Millisecond,
		P99Cap: 100 * time.Millisecond, MinSuccess: 0.999}
}

// Floor is the least baseline p99 the ratio applies to for kind k.
func (b Budget) Floor(k Kind) time.Duration {
	if k == NewConn {
		return b.P99Floor
	}
	return b.P99FloorKeep
}

// Limit returns the p99 a storm phase may reach for requests of kind k
// given their baseline p99.
func (b Budget) Limit(k Kind, baseline time.Duration) time.Duration {
	limit := time.Duration(b.P99Ratio * float64(max(baseline, b.Floor(k))))
	if b.P99Cap > 0 {
		limit = min(limit, b.P99Cap)
	}
	return limit
}

// Config is one storm run.
type Config struct {
	Sources       string        // "few", "many" or "both"
	PhaseDuration time.Duration // length of each phase
	Settle        time.Duration // pause between phases, for queues to drain
	Rate          uint64        // generator frames/s; 0: full speed
	MaxRate       uint64        // the hard frame bound is MaxRate * PhaseDuration
	Generator     string        // "auto", "xdp", "af_packet"
	FewSources    uint32        // per family, 1..16
	ManySources   uint32        // IPv6 forged sources; IPv4 uses min(this, 65536)
	TableSize     uint32        // capacity of the shield's sources table
	Limits        shield.Limits // Limits.DryRun runs the storms against a shield that only counts
	Client        ClientConfig
	Budget        Budget
	// UDPCapacity is how many requests a second the edge's datagram
	// service answers (DatagramService): above the shield's pass-through
	// under either storm, far below what an unfiltered storm aims at it.
	UDPCapacity  float64
	ProbeRate    uint64        // frames/s of each allow/deny-listed probe source (AF_PACKET, beside the storm)
	Contrast     bool          // also run the storms with no program attached; they must break the budget
	ProbeEvery   time.Duration // how often the service's API is asked
	ProbeTimeout time.Duration // a slower answer is a failure
	// Progress, when set, is called about twice a second.
	Progress func(Progress)
	Logger   *slog.Logger
	// Deployment runs the storm's parts; nil: Local.
	Deployment Deployment
}

// DefaultConfig is the `make demo` run: 4 phases of 8 s and 2 contrast
// phases, about 60 s in all on this machine.
//
// The storm is paced at 500,000 frames/s rather than full speed: on two
// cores a full-speed generator holds one core to itself, and with no
// program attached the edge's receive work slows it to 300-500k frames/s
// anyway, so a full-speed contrast compares different loads. At 500k both
// runs get about the same offered load. `-rate 0` runs at full speed
// (1.4-1.6M frames/s with the shield).
//
// The datagram service answers 15,000 requests/s. What the shield passes of
// the storm's UDP half stays well below that: 8 few sources at 1000/s
// (about 4k/s UDP), the forged storm's admissions at 10,000/s (5-6k/s UDP);
// unfiltered, the same half is about 250k/s, sixteen times the capacity.
// The bursts are a fifth of a second's worth (200 per source, 1,000 for
// admission) rather than the service's defaults: a storm's first moment
// passes sources x burst at once, and 32 sources with a burst of 2000 each
// overflowed the service for 130 ms (a new flood's sources each get their
// burst: the storm shows what that costs an edge).
func DefaultConfig() Config {
	return Config{
		Sources:       "both",
		PhaseDuration: 8 * time.Second,
		Settle:        time.Second,
		Rate:          500_000,
		MaxRate:       20_000_000,
		Generator:     "auto",
		FewSources:    4,
		ManySources:   1 << 22,
		// Small enough that the many-forged storm reaches capacity within a
		// phase (admission 10,000/s), so the table's replacement is exercised.
		TableSize:    1 << 16,
		Limits:       StormLimits(shield.Limits{Rate: 1000, Burst: 200, AdmissionRate: 10_000, AdmissionBurst: 1000}),
		Client:       DefaultClientConfig(),
		Budget:       DefaultBudget(),
		UDPCapacity:  15_000,
		ProbeRate:    2000, // twice the per-source limit: an allow-listed source is not limited
		Contrast:     true,
		ProbeEvery:   250 * time.Millisecond,
		ProbeTimeout: time.Second,
	}
}

// StormLimits returns l with the edge's services protected (TCP EdgePort,
// UDP DatagramPort, ICMP), so the flood is held to l's client limits while
// the edge's return traffic gets the generous unprotected class; the
// storm's SYNs to OtherPort, named by no limit, are no return traffic and
// are held to the client limits too (issue 23). Sources keep the default keys (IPv4 /32, IPv6 /64):
// the IPv6 storm sources each lie in a /64 of their own.
func StormLimits(l shield.Limits) shield.Limits {
	l.Protected = []shield.Destination{
		{Proto: shield.ProtoTCP, Port: EdgePort},
		{Proto: shield.ProtoUDP, Port: DatagramPort},
		{Proto: shield.ProtoICMP},
	}
	return l
}

// ShortConfig is DefaultConfig scaled down for emulated CPUs (the VM
// matrix): 3 s phases at 5,000 frames/s from the AF_PACKET generator (which
// sends 8-12k/s under TCG on a quiet host, 2-3k/s on a busy one; the
// emulated edge pays for every frame, dropped or not), and limits small
// enough that a generator ten times slower than that still has to be
// limited. At 500 frames/s, each of the 2 few sources sends 250/s against
// a bucket of 50/s with a burst of 20 (at most about 190 of 750 pass in a
// phase); the forged storm's strangers meet an admission bucket of 50/s,
// burst 20; and the datagram service answers 200/s, more than twice what
// the shield passes (about 85/s of UDP with the client's) and below the
// 250/s of UDP even such a slow storm aims at it.
//
// The client asks gently, so its own sources (about 20 packets/s each, 8 at
// once for a TLS handshake) stay under their limit, and sends each datagram
// request once: under emulation a baseline p99 of hundreds of milliseconds
// leaves latency budgets loose, so its answers carry the budget, and one
// lost at a full socket is a failure.
func ShortConfig() Config {
	cfg := DefaultConfig()
	cfg.PhaseDuration = 3 * time.Second
	cfg.Settle = 300 * time.Millisecond
	cfg.Rate = 5000
	cfg.Generator = "af_packet"
	cfg.FewSources = 1
	cfg.Limits = StormLimits(shield.Limits{Rate: 50, Burst: 20, AdmissionRate: 50, AdmissionBurst: 20})
	cfg.Client = ClientConfig{NewConnRate: 1, KeepAliveRate: 4, Timeout: 5 * time.Second,
		UDPRate: 4, UDPAttempt: time.Second, UDPAttempts: 1}
	cfg.UDPCapacity = 200
	// The listed probes are judged by the reason the shield gives them,
	// not their rate: 100/s each spares the emulated CPUs.
	cfg.ProbeRate = 100
	cfg.Budget.P99Cap = 0 // no absolute time means anything under TCG
	return cfg
}

func (c *Config) validate() error {
	var errs []error
	switch c.Sources {
	case "few", "many", "both":
	default:
		errs = append(errs, fmt.Errorf("sources %q: want few, many or both", c.Sources))
	}
	if c.PhaseDuration <= 0 || c.PhaseDuration > 10*time.Minute {
		errs = append(errs, fmt.Errorf("phase duration %v out of (0, 10m]", c.PhaseDuration))
	}
	if c.FewSources < 1 || c.FewSources > 16 {
		errs = append(errs, fmt.Errorf("few sources %d out of [1, 16]", c.FewSources))
	}
	if c.ManySources < 1 || c.ManySources > 1<<30 {
		errs = append(errs, fmt.Errorf("many sources %d out of [1, 2^30]", c.ManySources))
	}
	if c.MaxRate == 0 || (c.Rate > c.MaxRate) {
		errs = append(errs, fmt.Errorf("rate %d above the bound %d", c.Rate, c.MaxRate))
	}
	if c.UDPCapacity < 1 || c.UDPCapacity > 1e6 {
		errs = append(errs, fmt.Errorf("datagram service capacity %v out of [1, 1e6]", c.UDPCapacity))
	}
	if c.ProbeRate < 1 || c.ProbeRate > 100_000 {
		errs = append(errs, fmt.Errorf("probe rate %d out of [1, 100000]", c.ProbeRate))
	}
	if c.TableSize != 0 { // 0: the service's default
		if err := shield.CheckTableSize(c.TableSize); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Progress is the live state of the phase in progress.
type Progress struct {
	Phase    string
	Elapsed  time.Duration
	Length   time.Duration
	SentPPS  float64
	DropPPS  map[string]float64 // by reason
	PassPPS  float64
	P99      [numKinds]time.Duration
	Requests int
	Failures int
	APIOK    bool
	Sources  int
	Shield   bool // attached: pass and drop rates are meaningful
}

// Result is a whole run, as printed and written to JSON.
type Result struct {
	Started    time.Time     `json:"started"`
	Kernel     string        `json:"kernel"`
	Generator  string        `json:"generator"`
	RPS        bool          `json:"rps"`      // the edge's stack work spread over every core
	Rate       uint64        `json:"rate_pps"` // 0: full speed
	Phase      float64       `json:"phase_seconds"`
	TableSize  uint32        `json:"table_size"`
	Limits     shield.Limits `json:"limits"`
	Budget     Budget        `json:"budget"`
	Client     ClientConfig  `json:"client"`
	LegitNote  string        `json:"legit_client"`
	Phases     []*Phase      `json:"phases"`
	Contrast   []*Phase      `json:"contrast"`
	OK         bool          `json:"ok"`
	Error      string        `json:"error,omitempty"` // the run stopped early (interrupted, or broken)
	Failed     []string      `json:"failed"`
	RemovedOld []string      `json:"removed_stale_namespaces,omitempty"`
}

// Phase is one phase's figures and assertions.
type Phase struct {
	Name     string        `json:"name"`
	Storm    string        `json:"storm"` // none, few, many
	Shield   bool          `json:"shield_attached"`
	Seconds  float64       `json:"seconds"`
	Legit    LegitStats    `json:"legit"`
	Sent     SentStats     `json:"sent"`
	Counters *CounterStats `json:"counters,omitempty"`
	Veth     VethStats     `json:"veth"`
	API      *APIStats     `json:"api"`
	Table    TableStats    `json:"table"`
	Few      []SourceStats `json:"few_sources,omitempty"` // each source of the few storm, with the shield attached
	Service  ServiceStats  `json:"udp_service"`
	Restart  *RestartStats `json:"shield_restart,omitempty"` // the shield restarted mid-phase (Restarter deployments)
	Checks   []Check       `json:"assertions"`
}

// SourceStats are one storm source's figures in a phase.
type SourceStats struct {
	Addr    string `json:"addr"`
	SentMin uint64 `json:"sent_min"` // what the generator sent from it lies in [SentMin, SentMax]
	SentMax uint64 `json:"sent_max"`
	Passed  uint64 `json:"passed"`  // as the shield's table counted it
	Dropped uint64 `json:"dropped"` // dropped, or that would be in dry-run
}

// ServiceStats are the datagram service's figures in a phase.
type ServiceStats struct {
	Capacity float64     `json:"capacity_per_second"`
	Answered uint64      `json:"answered"` // requests answered, the storm's and the client's
	Kernel   UDPCounters `json:"kernel"`   // the edge namespace's UDP counters
}

// LegitStats are the legitimate client's figures in a phase.
type LegitStats struct {
	Requests   int             `json:"requests"`
	Failures   int             `json:"failures"`
	RatePerSec float64         `json:"rate_per_second"`
	Success    float64         `json:"success"`
	Kinds      map[string]Dist `json:"by_kind"`
	Errors     map[string]int  `json:"errors,omitempty"`
	Dropped    uint64          `json:"shield_dropped"` // packets of the client's sources the shield dropped
	Seen       uint64          `json:"shield_seen"`    // packets of the client's sources the shield saw
}

// Dist is one request kind's latency distribution.
type Dist struct {
	N     int     `json:"n"`
	Fail  int     `json:"failures"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

func (d Dist) success() float64 {
	if d.N+d.Fail == 0 {
		return 0
	}
	return float64(d.N) / float64(d.N+d.Fail)
}

// SentStats are what the generator sent in a phase.
type SentStats struct {
	Generator string            `json:"generator"`
	Frames    uint64            `json:"frames"`
	PPS       float64           `json:"pps"`
	ByFlow    map[string]uint64 `json:"by_flow"`
	Storm     uint64            `json:"storm"`      // forged or few sources
	AtService uint64            `json:"at_service"` // the storm's UDP frames, aimed at the datagram service
	Allowed   uint64            `json:"allowed"`    // allow-listed probes
	Denied    uint64            `json:"denied"`     // deny-listed probes
	// MaxPerSource is the most frames any one storm source sent.
	MaxPerSource uint64 `json:"max_per_source"`
}

// CounterStats are the shield's counter deltas of a phase.
type CounterStats struct {
	Pass  map[string]uint64 `json:"pass"` // by reason
	Drop  map[string]uint64 `json:"drop"`
	Total uint64            `json:"total"`
}

// VethStats are what the veth itself did in a phase.
type VethStats struct {
	Dropped       uint64 `json:"dropped"`             // frames the storm link refused before the edge's XDP stage (storm0 tx_dropped)
	Received      uint64 `json:"edge_rx_packets"`     // frames edge0 received
	EdgeRxDropped uint64 `json:"edge_rx_dropped"`     // edge0 rx_dropped: the above plus what the stack dropped after the shield passed it
	ClientDropped uint64 `json:"client_link_dropped"` // the same on the client's link
	ClientRx      uint64 `json:"client_link_rx_packets"`
}

// TableStats are the sources table's occupancy during a phase.
type TableStats struct {
	Max      int    `json:"max_entries_seen"`
	End      int    `json:"entries_at_end"`
	Capacity uint32 `json:"capacity"`
	Samples  int    `json:"samples"`
}

// Check is one assertion.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Budget bool   `json:"budget,omitempty"` // of the legitimate client's budget: must fail somewhere with no program attached
	Detail string `json:"detail"`
}

type stormKind string

const (
	stormNone stormKind = "none"
	stormFew  stormKind = "few"
	stormMany stormKind = "many"
	probes    stormKind = "probes" // allow- and deny-listed sources, sent beside either storm
)

// run holds what a Run needs across phases.
type run struct {
	cfg   Config
	log   *slog.Logger
	dep   Deployment
	top   *Topology
	sh    *shield.Shield
	svc   ShieldSide // `shield serve`'s wiring, on edge0
	token string
	xdp   []io.Closer // detach the shield from edge0 and edge1
	storm StormSide   // generators (allow/deny probes on AF_PACKET: a few thousand frames/s need no 28 ms live-frames runs) and client
	poll  *poller
	res   *Result
	edge  EdgeSide // HTTPS server and datagram service
	tpls  map[stormKind][]Template
	flows map[stormKind][]stormFlow // what each template is, in the same order
	few   []netip.Addr              // the few storm's sources, both families
	base  [numKinds]time.Duration
	// restarted: the shield was restarted in a phase (Restarter).
	restarted bool
}

// Run builds the topology, runs every phase and returns the result. An error
// means the run could not be carried out; failed assertions are in
// Result.OK and Result.Failed. Everything it creates is removed before it
// returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	r := &run{cfg: cfg, log: cfg.Logger, dep: cfg.Deployment}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.dep == nil {
		r.dep = Local{}
	}
	r.res = &Result{
		Started:   time.Now().UTC(),
		Kernel:    kernel.Release(),
		Rate:      cfg.Rate,
		Phase:     cfg.PhaseDuration.Seconds(),
		TableSize: cfg.TableSize,
		Limits:    cfg.Limits,
		Budget:    cfg.Budget,
		Client:    cfg.Client,
		LegitNote: "established source, not allow-listed: admitted by its first packet in the baseline, then held to the same per-source bucket as everyone",
	}
	// One storm at a time on a machine: two measure each other (`go test
	// ./...` runs the namespace storm and the container lane at once).
	unlock, err := LockStorms(ctx, r.log)
	if err != nil {
		r.res.Error = err.Error()
		return r.res, err
	}
	defer unlock()
	r.res.Started = time.Now().UTC()
	// The generator spends its time in long BPF_PROG_RUN syscalls; with
	// GOMAXPROCS equal to the core count, the P it holds through each call
	// is only handed over when sysmon notices (up to 10 ms), which the
	// client and server would pay as latency. One P more than cores keeps
	// them a full share of the machine.
	if n := runtime.NumCPU() + 1; runtime.GOMAXPROCS(0) < n {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	defer r.close()
	if err := r.setup(); err != nil {
		return nil, err
	}
	res, err := r.phases(ctx)
	if err != nil {
		res.OK = false
		res.Error = err.Error()
	}
	return res, err
}

// plan is one phase to run.
type plan struct {
	name  string
	storm stormKind
}

// phasePlan lists the phases of a run raising the storms of sources (few,
// many or both).
func phasePlan(sources string) []plan {
	phases := []plan{{"baseline", stormNone}}
	if sources != "many" {
		phases = append(phases, plan{"few-sources", stormFew})
	}
	if sources != "few" {
		phases = append(phases, plan{"many-forged", stormMany})
	}
	return append(phases, plan{"recovery", stormNone})
}

func (r *run) phases(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	phases := phasePlan(cfg.Sources)
	for _, p := range phases {
		ph, err := r.phase(ctx, p.name, p.storm, true)
		if err != nil {
			return r.res, fmt.Errorf("phase %s: %w", p.name, err)
		}
		r.res.Phases = append(r.res.Phases, ph)
		if ctx.Err() != nil {
			return r.res, ctx.Err()
		}
	}
	if cfg.Contrast {
		for _, l := range r.xdp {
			if err := l.Close(); err != nil {
				return r.res, fmt.Errorf("detach shield for the contrast run: %w", err)
			}
		}
		r.xdp = nil
		for _, p := range phases {
			if p.storm == stormNone {
				continue
			}
			ph, err := r.phase(ctx, "no-shield/"+p.name, p.storm, false)
			if err != nil {
				return r.res, fmt.Errorf("contrast phase %s: %w", p.name, err)
			}
			r.res.Contrast = append(r.res.Contrast, ph)
			if ctx.Err() != nil {
				return r.res, ctx.Err()
			}
		}
	}
	r.res.OK = true
	for _, p := range r.res.Phases {
		for _, c := range p.Checks {
			if !c.OK {
				r.res.OK = false
				r.res.Failed = append(r.res.Failed, p.Name+": "+c.Name+": "+c.Detail)
			}
		}
	}
	// Without the shield the budget is meant to break: only the check
	// that it did counts.
	for _, p := range r.res.Contrast {
		for _, c := range p.Checks {
			if !c.OK && !c.Budget {
				r.res.OK = false
				r.res.Failed = append(r.res.Failed, p.Name+": "+c.Name+": "+c.Detail)
			}
		}
	}
	return r.res, nil
}

func (r *run) setup() error {
	var err error
	if r.top, err = NewTopologyIn(r.dep); err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	r.res.RemovedOld = r.top.RemovedStale()
	r.res.RPS = r.top.RPS
	if err := r.startService(); err != nil {
		return err
	}
	if r.storm, err = r.dep.StartStorm(r.top, r.cfg.Generator); err != nil {
		return fmt.Errorf("storm side: %w", err)
	}
	r.res.Generator = r.storm.Name() + " (allow/deny probes: af_packet)"
	if err := r.buildStorms(); err != nil {
		return err
	}
	p := newAPIProber(r.svc.APIAddr(), r.token, r.top.Edge)
	r.poll = &poller{p: p, timeout: r.cfg.ProbeTimeout}

	if r.edge, err = r.dep.StartEdge(r.top, r.cfg.UDPCapacity); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	if err := r.storm.StartClient(r.edge.CA(), r.cfg.Client, Front4, Front6); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	// Warm up: neighbour resolution, the client's first (admitted) packets.
	time.Sleep(time.Second)
	return nil
}

func (r *run) close() {
	if r.storm != nil {
		if err := r.storm.Close(); err != nil {
			r.log.Warn("stop the storm side", logErr, err)
		}
	}
	if r.edge != nil {
		if err := r.edge.Close(); err != nil {
			r.log.Warn("stop the edge", logErr, err)
		}
	}
	if r.poll != nil {
		r.poll.p.Close()
	}
	for _, l := range r.xdp {
		l.Close()
	}
	if r.svc != nil {
		if err := r.svc.Close(); err != nil {
			r.log.Warn("stop shield service", logErr, err)
		}
	}
	if err := r.top.Close(); err != nil {
		r.log.Warn("remove namespaces", logErr, err)
	}
}

func (r *run) buildStorms() error {
	r.tpls = map[stormKind][]Template{}
	r.flows = map[stormKind][]stormFlow{}
	add := func(k stormKind, f Flow, w float64, role string) error {
		dst := Edge4
		if f.First.Is6() {
			dst = Edge6
		}
		t, err := BuildTemplate(f, r.top.StormMAC, r.top.EdgeMAC, dst)
		if err != nil {
			return err
		}
		r.tpls[k] = append(r.tpls[k], t)
		r.flows[k] = append(r.flows[k], stormFlow{Flow: f, weight: w, role: role})
		return nil
	}
	many4 := min(r.cfg.ManySources, MaxMany4)
	many6 := r.cfg.ManySources
	// Half the storm asks the datagram service, where an unfiltered flood
	// does its harm; a quarter is SYNs, a quarter pings. Of the SYNs, 3/5
	// go to the HTTPS port, 1/5 to a port no limit names (OtherPort), 1/5
	// to the HTTPS port behind a Destination Options header (IPv6; IPv4
	// sends the plain SYN there): the two escapes of issue 23, which the
	// shield must limit as the plain SYN.
	share := map[Proto]float64{UDP: 0.5, TCPSYN: 0.15, TCPSYNOther: 0.05, TCPSYNExt: 0.05, ICMP: 0.25}
	for _, p := range []Proto{UDP, TCPSYN, TCPSYNOther, TCPSYNExt, ICMP} {
		p4 := p
		if p == TCPSYNExt {
			p4 = TCPSYN
		}
		// Few: every source of both families at the same rate.
		if err := add(stormFew, Flow{p4, Few4, r.cfg.FewSources}, share[p]/2, "storm"); err != nil {
			return err
		}
		if err := add(stormFew, Flow{p, Few6, r.cfg.FewSources}, share[p]/2, "storm"); err != nil {
			return err
		}
		// Many: shares proportional to each family's range, so every forged
		// address recurs at the same (low) rate, as with a forger drawing
		// from the whole address space.
		tot := float64(many4) + float64(many6)
		if err := add(stormMany, Flow{p4, Many4, many4}, share[p]*float64(many4)/tot, "storm"); err != nil {
			return err
		}
		if err := add(stormMany, Flow{p, Many6, many6}, share[p]*float64(many6)/tot, "storm"); err != nil {
			return err
		}
	}
	for _, first := range []netip.Addr{Few4, Few6} {
		f := Flow{First: first, Count: r.cfg.FewSources}
		for i := range f.Count {
			r.few = append(r.few, f.Source(i))
		}
	}
	// The allow-listed probes ping rather than ask the datagram service:
	// what they send is the operator's trust, not the storm, and must not
	// spend the service's capacity.
	for _, a := range []netip.Addr{Allowed4, Allowed6} {
		if err := add(probes, Flow{ICMP, a, 1}, 1, "allowed"); err != nil {
			return err
		}
	}
	for _, a := range []netip.Addr{Denied4, Denied6} {
		if err := add(probes, Flow{TCPSYN, a, 1}, 1, "denied"); err != nil {
			return err
		}
	}
	return nil
}

// stormFlow is one template's flow, its share of the storm and its role:
// "storm", "allowed" or "denied".
type stormFlow struct {
	Flow
	weight float64
	role   string
}

func (f stormFlow) name() string { return f.role + " " + f.Flow.String() }

func (r *run) weights(k stormKind) []float64 {
	var w []float64
	for _, f := range r.flows[k] {
		w = append(w, f.weight)
	}
	return w
}

// snapshot is what is read at a phase boundary.
type snapshot struct {
	at       time.Time
	counters shield.Counters
	veth     VethCounters
	sources  map[netip.Addr]shield.Source // the client's and the few storm's, when tracked
	served   uint64                       // requests the datagram service answered
	udp      UDPCounters                  // the edge's
}

func (r *run) snap() (snapshot, error) {
	s := snapshot{at: time.Now(), sources: map[netip.Addr]shield.Source{}}
	var err error
	if s.counters, err = r.sh.Counters(); err != nil {
		return s, err
	}
	for _, a := range append([]netip.Addr{Client4, Client6}, r.few...) {
		src, ok, err := r.sh.Source(a)
		if err != nil {
			return s, err
		}
		if ok {
			s.sources[a] = src
		}
	}
	if s.served, err = r.edge.Served(); err != nil {
		return s, err
	}
	if s.udp, err = ReadUDPCounters(r.top.Edge); err != nil {
		return s, err
	}
	if s.veth, err = r.top.VethStats(); err != nil {
		return s, err
	}
	return s, nil
}

// phase runs one phase: the legitimate client throughout, the storm of kind
// k if any, the API poller and the table watcher; then settles and reads.
func (r *run) phase(ctx context.Context, name string, k stormKind, shielded bool) (*Phase, error) {
	log := r.log.With(logPhase, name)
	ph := &Phase{Name: name, Storm: string(k), Shield: shielded, Table: TableStats{Capacity: r.cfg.TableSize}}

	before, err := r.snap()
	if err != nil {
		return nil, err
	}

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if _, err := r.storm.Switch(true); err != nil {
		return nil, err
	}
	r.poll.switchPhase(true)
	start := time.Now()

	var sent atomic.Uint64
	var per, perProbe []uint64
	var genErr, probeErr error
	if k != stormNone {
		probeSpec := StormSpec{
			Templates: r.tpls[probes],
			Rate:      r.cfg.ProbeRate * uint64(len(r.tpls[probes])),
			Duration:  r.cfg.PhaseDuration,
			MaxFrames: r.cfg.ProbeRate * uint64(len(r.tpls[probes])) * uint64(r.cfg.PhaseDuration/time.Second+1),
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			perProbe, probeErr = r.storm.Storm(pctx, true, probeSpec, &sent)
		}()
		spec := StormSpec{
			Templates: r.tpls[k],
			Weights:   r.weights(k),
			Rate:      r.cfg.Rate,
			Duration:  r.cfg.PhaseDuration,
			MaxFrames: r.cfg.MaxRate * uint64(max(r.cfg.PhaseDuration/time.Second, 1)),
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			per, genErr = r.storm.Storm(pctx, false, spec, &sent)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.poll.run(pctx, r.cfg.ProbeEvery)
	}()
	var restartErr error
	if rs, ok := r.dep.(Restarter); ok && shielded && k != stormNone && !r.restarted {
		r.restarted = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Early, so the storm outlasts the restart on a slow
			// machine; the restart itself is not cut short by the
			// phase's end (only by the run's), which waits for it.
			select {
			case <-pctx.Done():
				restartErr = errors.New("the phase ended before the restart")
				return
			case <-time.After(r.cfg.PhaseDuration / 5):
			}
			r.poll.pause(true)
			defer r.poll.pause(false)
			st, err := rs.RestartShield(ctx)
			ph.Restart, restartErr = &st, err
		}()
	}
	var tableMu sync.Mutex
	if shielded {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.watchTable(pctx, &ph.Table, &tableMu)
		}()
	}

	// Progress, until the phase is over.
	timer := time.NewTimer(r.cfg.PhaseDuration)
	ticker := time.NewTicker(500 * time.Millisecond)
	lastC, lastSent, lastAt := before.counters, uint64(0), start
	waiting := true
	for waiting {
		select {
		case <-ctx.Done():
			waiting = false
		case <-timer.C:
			waiting = false
		case now := <-ticker.C:
			if r.cfg.Progress == nil {
				continue
			}
			p := Progress{Phase: name, Elapsed: now.Sub(start), Length: r.cfg.PhaseDuration, APIOK: r.poll.ok(), DropPPS: map[string]float64{}, Shield: shielded}
			dt := now.Sub(lastAt).Seconds()
			s := sent.Load()
			p.SentPPS = float64(s-lastSent) / dt
			lastSent, lastAt = s, now
			if c, err := r.sh.Counters(); err == nil && shielded {
				d := c.Sub(lastC)
				lastC = c
				for reason, n := range byReason(d, shield.Drop) {
					if n > 0 {
						p.DropPPS[reason] = float64(n) / dt
					}
				}
				p.PassPPS = float64(d.Verdict(shield.Pass)) / dt
			}
			p.P99, p.Requests, p.Failures = r.storm.Peek()
			tableMu.Lock()
			p.Sources = ph.Table.End
			tableMu.Unlock()
			r.cfg.Progress(p)
		}
	}
	timer.Stop()
	ticker.Stop()
	cancel()
	wg.Wait()
	samples, recErr := r.storm.Switch(false)
	ph.API = r.poll.switchPhase(false)
	ph.Seconds = time.Since(start).Seconds()
	if err := errors.Join(genErr, probeErr, recErr); err != nil {
		return nil, err
	}

	// Let the veth ring and the stack drain before reading the counters.
	select {
	case <-ctx.Done():
	case <-time.After(r.cfg.Settle):
	}
	after, err := r.snap()
	if err != nil {
		return nil, err
	}
	if shielded {
		if n, err := r.sh.CountSources(ctx); err == nil {
			ph.Table.End = n
			ph.Table.Max = max(ph.Table.Max, n)
			ph.Table.Samples++
		}
	}
	r.fill(ph, samples, before, after, map[stormKind][]uint64{k: per, probes: perProbe})
	if name == "baseline" {
		for kind := range numKinds {
			r.base[kind] = time.Duration(ph.Legit.Kinds[Kind(kind).String()].P99Ms * 1e6)
		}
	}
	r.assert(ph, k)
	if ph.Restart != nil || restartErr != nil {
		r.assertRestart(ph, restartErr)
	}
	log.Debug("phase done", logRequests, ph.Legit.Requests, logSent, ph.Sent.Frames)
	return ph, nil
}

// watchTable samples the table's occupancy every two seconds (a walk of a
// full table costs the edge some CPU; the API probe reports the count too,
// from its own cached walk, and fails if it exceeds the capacity).
func (r *run) watchTable(ctx context.Context, t *TableStats, mu *sync.Mutex) {
	tk := time.NewTicker(2 * time.Second)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		n, err := r.sh.CountSources(ctx)
		if err != nil {
			continue
		}
		mu.Lock()
		t.Samples++
		t.End = n
		t.Max = max(t.Max, n)
		mu.Unlock()
	}
}
