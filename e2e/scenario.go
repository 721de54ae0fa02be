package e2e

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
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
func (b Budget) Floor(k parts.Kind) time.Duration {
	if k == parts.NewConn {
		return b.P99Floor
	}
	return b.P99FloorKeep
}

// Limit returns the p99 a storm phase may reach for requests of kind k
// given their baseline p99.
func (b Budget) Limit(k parts.Kind, baseline time.Duration) time.Duration {
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
	Limits        config.Limits // Limits.DryRun runs the storms against a shield that only counts
	Client        parts.ClientConfig
	Budget        Budget
	// UDPCapacity is how many requests a second the edge's datagram
	// service answers (DatagramService): above the shield's pass-through
	// under either storm, far below what an unfiltered storm aims at it.
	UDPCapacity  float64
	ListedRate   uint64        // frames/s of each allow/deny-listed source (AF_PACKET, beside the storm)
	Contrast     bool          // also run the storms with no program attached; they must break the budget
	WatchEvery   time.Duration // how often the service's API is asked
	WatchTimeout time.Duration // a slower answer is a failure
	// Progress, when set, is called about twice a second.
	Progress func(Progress)
	Logger   *slog.Logger
	// Deployment runs the storm's parts; nil: parts.Local.
	Deployment parts.Deployment
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
		Limits:       StormLimits(config.Limits{Rate: 1000, Burst: 200, AdmissionRate: 10_000, AdmissionBurst: 1000}),
		Client:       parts.DefaultClientConfig(),
		Budget:       DefaultBudget(),
		UDPCapacity:  15_000,
		ListedRate:   2000, // twice the per-source limit: an allow-listed source is not limited
		Contrast:     true,
		WatchEvery:   250 * time.Millisecond,
		WatchTimeout: time.Second,
	}
}

// StormLimits returns l with the edge's services protected (TCP EdgePort,
// UDP DatagramPort, ICMP), so the flood is held to l's client limits while
// the edge's return traffic gets the generous unprotected class; the
// storm's SYNs to OtherPort, named by no limit, are no return traffic and
// are held to the client limits too (issue 23). Sources keep the default keys (IPv4 /32, IPv6 /64):
// the IPv6 storm sources each lie in a /64 of their own.
func StormLimits(l config.Limits) config.Limits {
	l.Protected = []config.Destination{
		{Proto: counter.ProtoTCP, Port: storm.EdgePort},
		{Proto: counter.ProtoUDP, Port: storm.DatagramPort},
		{Proto: counter.ProtoICMP},
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
	cfg.Limits = StormLimits(config.Limits{Rate: 50, Burst: 20, AdmissionRate: 50, AdmissionBurst: 20})
	cfg.Client = parts.ClientConfig{NewConnRate: 1, KeepAliveRate: 4, Timeout: 5 * time.Second,
		UDPRate: 4, UDPAttempt: time.Second, UDPAttempts: 1}
	cfg.UDPCapacity = 200
	// The listed sources are judged by the reason the shield gives them,
	// not their rate: 100/s each spares the emulated CPUs.
	cfg.ListedRate = 100
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
	if c.ListedRate < 1 || c.ListedRate > 100_000 {
		errs = append(errs, fmt.Errorf("listed sources' rate %d out of [1, 100000]", c.ListedRate))
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
	P50, P99 [parts.NumKinds]time.Duration
	Requests int
	Failures int
	APIOK    bool
	Sources  int
	Shield   bool // attached: pass and drop rates are meaningful
}

// Result is a whole run, as printed and written to JSON.
type Result struct {
	Started    time.Time          `json:"started"`
	Kernel     string             `json:"kernel"`
	Generator  string             `json:"generator"`
	RPS        bool               `json:"rps"`      // the edge's stack work spread over every core
	Rate       uint64             `json:"rate_pps"` // 0: full speed
	Phase      float64            `json:"phase_seconds"`
	TableSize  uint32             `json:"table_size"`
	Limits     config.Limits      `json:"limits"`
	Budget     Budget             `json:"budget"`
	Client     parts.ClientConfig `json:"client"`
	LegitNote  string             `json:"legit_client"`
	Phases     []*Phase           `json:"phases"`
	Contrast   []*Phase           `json:"contrast"`
	OK         bool               `json:"ok"`
	Error      string             `json:"error,omitempty"` // the run stopped early (interrupted, or broken)
	Failed     []string           `json:"failed"`
	RemovedOld []string           `json:"removed_stale_namespaces,omitempty"`
}

// Phase is one phase's figures and assertions.
type Phase struct {
	Name     string              `json:"name"`
	Storm    string              `json:"storm"` // none, few, many
	Shield   bool                `json:"shield_attached"`
	Seconds  float64             `json:"seconds"`
	Legit    LegitStats          `json:"legit"`
	Sent     SentStats           `json:"sent"`
	Counters *CounterStats       `json:"counters,omitempty"`
	Veth     VethStats           `json:"veth"`
	API      *APIStats           `json:"api"`
	Table    TableStats          `json:"table"`
	Few      []SourceStats       `json:"few_sources,omitempty"` // each source of the few storm, with the shield attached
	Service  ServiceStats        `json:"udp_service"`
	Restart  *parts.RestartStats `json:"shield_restart,omitempty"` // the shield restarted mid-phase (Restarter deployments)
	Checks   []Check             `json:"assertions"`
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
	Capacity float64           `json:"capacity_per_second"`
	Answered uint64            `json:"answered"` // requests answered, the storm's and the client's
	Kernel   parts.UDPCounters `json:"kernel"`   // the edge namespace's UDP counters
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
	Allowed   uint64            `json:"allowed"`    // allow-listed sources
	Denied    uint64            `json:"denied"`     // deny-listed sources
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
	listed    stormKind = "listed" // allow- and deny-listed sources, sent beside either storm
)
