package workbench

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/source"
)

// Source is what the page reads of a shield (*shield.Shield is one).
type Source interface {
	Counters() (counter.Counters, error)
	CountSources(ctx context.Context) (int, error)
	TableSize() uint32
	List(l lists.List) ([]netip.Prefix, error)
	Limits() config.Limits
	Top(ctx context.Context, n int, by source.TopOrder) ([]source.Source, shield.WalkStats, error)
}

// Rate is one verdict and reason's packets per second.
type Rate struct {
	Verdict string  `json:"verdict"`
	Reason  string  `json:"reason"`
	PPS     float64 `json:"pps"`
}

// Sample is one event of the live stream (GET Prefix+"events").
type Sample struct {
	// At is when it was read (Unix milliseconds).
	At int64 `json:"at"`
	// Seconds is the span the rates are measured over (0 for the first).
	Seconds float64 `json:"seconds"`
	// PPS is packets per second by verdict (pass, drop).
	PPS map[string]float64 `json:"pps"`
	// Rates lists each verdict and reason with a non-zero count so far.
	Rates []Rate `json:"rates"`
	// Totals are the counters since the program was loaded.
	Totals   map[string]uint64 `json:"totals"`
	Tracked  int               `json:"tracked"`  // sources in the table
	Capacity uint32            `json:"capacity"` // the table's capacity
	Lists    map[string]int    `json:"lists"`    // allow and deny list sizes
	Limits   config.Limits     `json:"limits"`
	Top      []source.Source   `json:"top"` // by dropped, refreshed every topEvery
	Storm    *StormState       `json:"storm"`
	Error    string            `json:"error,omitempty"`
}

// topEvery is how often the top talkers are walked for (a walk reads the
// whole table); topN how many are shown.
const (
	topEvery = 3 * time.Second
	topN     = 8
)

// sampler reads the shield at most once per interval, whatever the number
// of viewers: every stream shares the last sample.
type sampler struct {
	src      Source
	interval time.Duration
	mu       sync.Mutex
	last     Sample
	lastC    counter.Counters
	lastAt   time.Time
	top      []source.Source
	topAt    time.Time
}

func (s *sampler) sample(ctx context.Context) Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if !s.lastAt.IsZero() && now.Sub(s.lastAt) < s.interval*9/10 {
		return s.last
	}
	smp := Sample{At: now.UnixMilli(), PPS: map[string]float64{}, Totals: map[string]uint64{},
		Lists: map[string]int{}, Rates: []Rate{}, Capacity: s.src.TableSize(), Limits: s.src.Limits()}
	c, err := s.src.Counters()
	if err != nil {
		smp.Error = "counters: " + err.Error()
		return smp
	}
	dt := 0.0
	if !s.lastAt.IsZero() {
		dt = now.Sub(s.lastAt).Seconds()
	}
	smp.Seconds = dt
	d := c.Sub(s.lastC)
	for _, v := range counter.Verdicts() {
		smp.Totals[v.String()] = c.Verdict(v)
		smp.PPS[v.String()] = rate(d.Verdict(v), dt)
		for _, r := range counter.Reasons() {
			var total, delta uint64
			for _, p := range counter.Protos() {
				total += c[v][r][p]
				delta += d[v][r][p]
			}
			if total > 0 {
				smp.Rates = append(smp.Rates, Rate{v.String(), r.String(), rate(delta, dt)})
			}
		}
	}
	if n, err := s.src.CountSources(ctx); err == nil {
		smp.Tracked = n
	} else {
		smp.Error = "sources: " + err.Error()
	}
	for _, l := range []lists.List{lists.AllowList, lists.DenyList} {
		if ps, err := s.src.List(l); err == nil {
			smp.Lists[l.String()] = len(ps)
		}
	}
	if s.topAt.IsZero() || now.Sub(s.topAt) >= topEvery {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if top, _, err := s.src.Top(tctx, topN, source.ByDropped); err == nil {
			s.top, s.topAt = top, now
		}
		cancel()
	}
	smp.Top = s.top
	if smp.Top == nil {
		smp.Top = []source.Source{}
	}
	s.last, s.lastC, s.lastAt = smp, c, now
	return smp
}

func rate(n uint64, dt float64) float64 {
	if dt <= 0 {
		return 0
	}
	return float64(n) / dt
}
