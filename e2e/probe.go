package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// APIStats are one phase's probes.
type APIStats struct {
	Prober   string  `json:"prober"`
	Polls    int     `json:"polls"`
	Failures int     `json:"failures"`
	MaxMs    float64 `json:"max_ms"`
	LastErr  string  `json:"last_error,omitempty"`
}

// poller asks the service's API every period whether it still answers
// (a failed or slow answer is counted against the phase) and keeps
// per-phase stats.
type poller struct {
	p       *apiProber
	timeout time.Duration
	mu      sync.Mutex
	cur     *APIStats
	last    error
	paused  bool // the service is being restarted on purpose (Restarter)
}

// pause stops (or resumes) probing: a restart's outage is the restart's
// figure (RestartStats.DownMs), not the API's failure.
func (pl *poller) pause(on bool) {
	pl.mu.Lock()
	pl.paused = on
	pl.mu.Unlock()
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
		pl.mu.Lock()
		paused := pl.paused
		pl.mu.Unlock()
		if paused {
			continue
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
		if pl.paused {
			pl.mu.Unlock()
			continue // begun before the pause
		}
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
