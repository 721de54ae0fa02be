package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	"xdpshield/internal/topo"
	"xdpshield/shield"
)

// Prober asks the service whether it still answers. The storm polls it
// throughout; a failed or slow answer is counted against the phase.
type Prober interface {
	Name() string
	Probe(ctx context.Context) error
	Close() error
}

// NewProber makes the prober of a storm, given the loaded shield and the
// edge namespace (where a service would run).
type NewProber func(sh *shield.Shield, edge *topo.NS) (Prober, error)

// CountersProber reads the counters straight from the shield: what the
// service does for GET /v1/counters, without HTTP.
func CountersProber(sh *shield.Shield, _ *topo.NS) (Prober, error) {
	return countersProber{sh}, nil
}

type countersProber struct{ sh *shield.Shield }

func (p countersProber) Name() string { return "shield.Counters" }
func (p countersProber) Close() error { return nil }
func (p countersProber) Probe(context.Context) error {
	_, err := p.sh.Counters()
	return err
}

// APIStats are one phase's probes.
type APIStats struct {
	Prober   string  `json:"prober"`
	Polls    int     `json:"polls"`
	Failures int     `json:"failures"`
	MaxMs    float64 `json:"max_ms"`
	LastErr  string  `json:"last_error,omitempty"`
}

// poller probes every period and keeps per-phase stats.
type poller struct {
	p       Prober
	timeout time.Duration
	mu      sync.Mutex
	cur     *APIStats
	last    error
}

func (pl *poller) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, pl.timeout)
		began := time.Now()
		err := pl.p.Probe(pctx)
		d := time.Since(began)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil && d > pl.timeout {
			err = fmt.Errorf("answered after %v (timeout %v)", d, pl.timeout)
		}
		pl.mu.Lock()
		pl.last = err
		if s := pl.cur; s != nil {
			s.Polls++
			s.MaxMs = max(s.MaxMs, float64(d)/1e6)
			if err != nil {
				s.Failures++
				s.LastErr = err.Error()
			}
		}
		pl.mu.Unlock()
	}
}

// switchPhase starts a fresh APIStats (or none) and returns the last one.
func (pl *poller) switchPhase(start bool) *APIStats {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	prev := pl.cur
	pl.cur = nil
	if start {
		pl.cur = &APIStats{Prober: pl.p.Name()}
	}
	return prev
}

func (pl *poller) ok() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.last == nil
}
