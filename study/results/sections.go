package results

import (
	"fmt"
	"math"

	"github.com/xdpshield/xdpshield/e2e/storm"
)

// L7 targets, in the order of a round (rotated from round to round).
var L7Targets = []string{"direct", "fast path", "go proxy", "haproxy", "nginx"}

// L7 load shapes.
const (
	L7Closed = "closed" // each connection sends its next request when the last is answered
	L7Fixed  = "fixed"  // requests at a fixed rate, latency from when each was due
)

// L7 connection kinds and response bodies.
var (
	L7Conns  = []string{"keep-alive", "new"}
	L7Bodies = []int{2, 64 << 10}
)

// L7Cell is one cell of the L7 comparison (target, load, connection kind,
// body size) over every round.
type L7Cell struct {
	Target  string     `json:"target"`
	Load    string     `json:"load"`
	Conn    string     `json:"conn"`
	Body    int        `json:"body_bytes"`
	Samples []L7Sample `json:"runs"`
	RPS     Stat       `json:"requests_per_second"`
	P50     Stat       `json:"p50_ms"`
	P99     Stat       `json:"p99_ms"`
	P999    Stat       `json:"p999_ms"` // N 0: no run had enough samples
	CPUReq  Stat       `json:"cpu_per_request_us"`
	BusyReq Stat       `json:"busy_per_request_us"`
	Errors  Stat       `json:"errors"`
}

// L7Sample is one round of a cell.
type L7Sample struct {
	Run        int     `json:"run"`
	Seconds    float64 `json:"seconds"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	RPS        float64 `json:"requests_per_second"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	P999       float64 `json:"p999_ms,omitempty"`
	ProxyCPU   float64 `json:"proxy_cpu_seconds"`
	SoftirqCPU float64 `json:"softirq_cpu_seconds"`
	BusyCPU    float64 `json:"busy_cpu_seconds"`
	CPUPerReq  float64 `json:"cpu_per_request_us"`  // (proxy + softirq) / requests
	BusyPerReq float64 `json:"busy_per_request_us"` // every CPU's non-idle time / requests
}

// L7Results are the L7 comparison.
type L7Results struct {
	Versions  map[string]string `json:"versions"`
	Conns     int               `json:"connections"`
	Rate      float64           `json:"fixed_rate"`
	Seconds   float64           `json:"phase_seconds"`
	FastPath  string            `json:"fast_path"` // "attached" or why not
	Cells     []*L7Cell         `json:"cells"`
	Skipped   []string          `json:"skipped,omitempty"`
	HAProxy   string            `json:"haproxy_config"`
	NginxConf string            `json:"nginx_config"`
}

func (r *L7Results) AddCell(target, load, conn string, body int) *L7Cell {
	for _, c := range r.Cells {
		if c.Target == target && c.Load == load && c.Conn == conn && c.Body == body {
			return c
		}
	}
	c := &L7Cell{Target: target, Load: load, Conn: conn, Body: body}
	r.Cells = append(r.Cells, c)
	return c
}

// Cell returns the cell, nil when not measured.
func (r *L7Results) Cell(target, load, conn string, body int) *L7Cell {
	if r == nil {
		return nil
	}
	for _, c := range r.Cells {
		if c.Target == target && c.Load == load && c.Conn == conn && c.Body == body {
			return c
		}
	}
	return nil
}

func (r *L7Results) Finish() {
	for _, c := range r.Cells {
		// A negative figure is a missing one (StatOf leaves NaN out).
		col := func(f func(L7Sample) float64) Stat {
			return StatBy(c.Samples, func(s L7Sample) float64 {
				if v := f(s); v >= 0 {
					return v
				}
				return math.NaN()
			})
		}
		c.RPS = col(func(s L7Sample) float64 { return s.RPS })
		c.P50 = col(func(s L7Sample) float64 { return s.P50 })
		c.P99 = col(func(s L7Sample) float64 { return s.P99 })
		c.P999 = col(func(s L7Sample) float64 {
			if s.P999 == 0 {
				return -1
			}
			return s.P999
		})
		c.CPUReq = col(func(s L7Sample) float64 { return s.CPUPerReq })
		c.BusyReq = col(func(s L7Sample) float64 { return s.BusyPerReq })
		c.Errors = col(func(s L7Sample) float64 { return float64(s.Errors) })
	}
}

func (r *L7Results) Missing() []string {
	if r == nil {
		return []string{"l7 peers: not measured"}
	}
	var out []string
	for _, c := range r.Cells {
		switch {
		case len(c.Samples) == 0:
			out = append(out, fmt.Sprintf("l7 %s %s %s %dB: not measured", c.Target, c.Load, c.Conn, c.Body))
		case c.RPS.Median <= 0:
			out = append(out, fmt.Sprintf("l7 %s %s %s %dB: no request answered", c.Target, c.Load, c.Conn, c.Body))
		}
	}
	if len(r.Cells) == 0 {
		out = append(out, "l7 peers: no cell measured")
	}
	return out
}

// List targets: the XDP_DROP floor, the shield's deny list and xdp-tools'
// xdp-filter with its list as a deny list, on the same link, from the same
// frames. (xdp-filter's "-p deny" is a default-deny policy, its list
// then the allowed: a deny list is "-p allow", its default.)
var ListTargets = []string{"floor", "shield", "xdp-filter"}

// ListSizes are the deny lists' sizes (host prefixes, per family).
var ListSizes = []int{1000, 1 << 16, 1 << 20}

// ListFamilies are the families measured.
var ListFamilies = []string{"ipv4", "ipv6"}

// ListCell is one (target, family, size) over every run. The floor's size
// is 0: it has no list.
type ListCell struct {
	Target  string       `json:"target"`
	Family  string       `json:"family"`
	Size    int          `json:"size"`
	Samples []DropSample `json:"runs"`
	Load    []float64    `json:"load_seconds"` // time to write the list, each run
	Refused string       `json:"refused,omitempty"`
	Held    int          `json:"held,omitempty"` // entries written before the refusal
	SeenPPS Stat         `json:"seen_pps"`
	DropPPS Stat         `json:"drop_pps"`
	PerCPU  Stat         `json:"drops_per_softirq_cpu_second"`
	LoadSec Stat         `json:"load_seconds_stat"`
}

// ListResults are the list comparison.
type ListResults struct {
	XDPFilter string      `json:"xdp_filter_version"`
	Sizes     []int       `json:"sizes"`
	CLIAddrs  int         `json:"cli_addresses"`
	CLISec    []float64   `json:"cli_seconds"` // `xdp-filter ip` run CLIAddrs times, each run
	CLIPerMs  Stat        `json:"cli_ms_per_address"`
	Cells     []*ListCell `json:"cells"`
	Skipped   []string    `json:"skipped,omitempty"`
}

// Cell returns a cell, nil when not measured.
func (r *ListResults) Cell(target, family string, size int) *ListCell {
	if r == nil {
		return nil
	}
	for _, c := range r.Cells {
		if c.Target == target && c.Family == family && c.Size == size {
			return c
		}
	}
	return nil
}

func (r *ListResults) AddCell(target, family string, size int) *ListCell {
	if c := r.Cell(target, family, size); c != nil {
		return c
	}
	c := &ListCell{Target: target, Family: family, Size: size}
	r.Cells = append(r.Cells, c)
	return c
}

func (r *ListResults) Finish() {
	for _, c := range r.Cells {
		col := func(f func(DropSample) float64) Stat { return StatBy(c.Samples, f) }
		c.SeenPPS = col(func(s DropSample) float64 { return s.SeenPPS })
		c.DropPPS = col(func(s DropSample) float64 { return s.DropPPS })
		c.PerCPU = col(func(s DropSample) float64 { return s.DropsPerCPUSec })
		c.LoadSec = StatOf(c.Load)
	}
	var per []float64
	for _, s := range r.CLISec {
		per = append(per, s/float64(max(r.CLIAddrs, 1))*1e3)
	}
	r.CLIPerMs = StatOf(per)
}

func (r *ListResults) Missing() []string {
	if r == nil {
		return []string{"lists: not measured"}
	}
	var out []string
	for _, c := range r.Cells {
		switch {
		case c.Refused != "":
		case len(c.Samples) == 0:
			out = append(out, fmt.Sprintf("lists %s %s %d: not measured", c.Target, c.Family, c.Size))
		case c.DropPPS.Median <= 0:
			out = append(out, fmt.Sprintf("lists %s %s %d: nothing dropped", c.Target, c.Family, c.Size))
		}
	}
	if len(r.Cells) == 0 {
		out = append(out, "lists: no cell measured")
	}
	return out
}

// LBTargets are what the xdplb section puts on edge0, in the order of a run:
// the XDP_DROP floor, the XDP_TX floor (the frame sent back out unmodified)
// and the balancer (match the VIP, pick a backend, encapsulate, XDP_TX)
// with 65,536 flows (most frames a new flow for its CPU's connection
// table: an LRU insert) and with 16 (every frame a connection-table hit).
var LBTargets = []string{"drop", "tx", "xdplb", "xdplb-16"}

// lbFlows is how many flows (sources) each target is sent.
func LBFlows(target string) uint32 {
	if target == "xdplb-16" {
		return 16
	}
	return storm.MaxMany4
}

// LBBackends is how many backends the balanced VIP has (never reached: the
// encapsulated frames go back out edge0 to storm0, which drops them).
const LBBackends = 4

// LBCell is one (target, family) over every run. In its samples, Dropped
// is what the target handled: dropped, sent back, or balanced.
type LBCell struct {
	Target  string       `json:"target"`
	Family  string       `json:"family"`
	Samples []DropSample `json:"runs"`
	// Reasons are xdplb's counters over each run (its decisions).
	Reasons []map[string]uint64 `json:"xdplb_reasons,omitempty"`
	GenPPS  Stat                `json:"generator_pps"` // sent / seconds: the generator's own rate
	SeenPPS Stat                `json:"seen_pps"`
	DonePPS Stat                `json:"handled_pps"`
	PerCPU  Stat                `json:"handled_per_softirq_cpu_second"`
}

// GeneratorBound reports whether the generator's own rate (what it sends
// into the XDP_DROP floor, floor) is not well above what c handled
// (within 10%): the figure is then the generator's, not the target's.
// The floor itself always is.
func (c *LBCell) GeneratorBound(floor *LBCell) bool {
	return floor != nil && c.DonePPS.Median >= 0.9*floor.GenPPS.Median
}

// Moved is the share of new flows that change backend when one of N
// backends goes: Maglev (xdplb's table) against a hash modulo N and
// against nftables' `jhash ... mod N`, which is no modulo: nft_jhash
// scales the hash into N ranges (reciprocal_scale, (h*N)>>32).
type Moved struct {
	N      int     `json:"backends"`
	Maglev float64 `json:"maglev"`
	Modulo float64 `json:"modulo"`
	NFT    float64 `json:"nft_jhash"`
}

// LBResults are the xdplb section.
type LBResults struct {
	Cells   []*LBCell `json:"cells"`
	Moved   []Moved   `json:"moved"`
	Skipped []string  `json:"skipped,omitempty"`
}

// Cell returns a cell, nil when not measured.
func (r *LBResults) Cell(target, family string) *LBCell {
	if r == nil {
		return nil
	}
	for _, c := range r.Cells {
		if c.Target == target && c.Family == family {
			return c
		}
	}
	return nil
}

func (r *LBResults) AddCell(target, family string) *LBCell {
	if c := r.Cell(target, family); c != nil {
		return c
	}
	c := &LBCell{Target: target, Family: family}
	r.Cells = append(r.Cells, c)
	return c
}

func (r *LBResults) Finish() {
	for _, c := range r.Cells {
		col := func(f func(DropSample) float64) Stat { return StatBy(c.Samples, f) }
		c.GenPPS = col(func(s DropSample) float64 { return float64(s.Sent) / s.Seconds })
		c.SeenPPS = col(func(s DropSample) float64 { return s.SeenPPS })
		c.DonePPS = col(func(s DropSample) float64 { return s.DropPPS })
		c.PerCPU = col(func(s DropSample) float64 { return s.DropsPerCPUSec })
	}
}

func (r *LBResults) Missing() []string {
	if r == nil {
		return []string{"xdplb: not measured"}
	}
	var out []string
	for _, t := range LBTargets {
		for _, fam := range ListFamilies {
			c := r.Cell(t, fam)
			switch {
			case c == nil || len(c.Samples) == 0:
				out = append(out, fmt.Sprintf("xdplb %s %s: not measured", t, fam))
			case c.DonePPS.Median <= 0:
				out = append(out, fmt.Sprintf("xdplb %s %s: nothing handled", t, fam))
			}
		}
	}
	for _, m := range r.Moved {
		// Maglev's disruption bound (Eisenbud et al., NSDI 2016, 3.4): the
		// removed backend's share moves, little more.
		if m.Maglev < 1/float64(m.N)-0.01 || m.Maglev > 1/float64(m.N)+0.05 {
			out = append(out, fmt.Sprintf("xdplb moved n=%d: Maglev moved %.3f of the flows, not about 1/n", m.N, m.Maglev))
		}
	}
	return out
}
