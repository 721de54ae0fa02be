package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// APIStats are one phase's polls of the service's API.
type APIStats struct {
	Request  string  `json:"request"` // what each poll asks
	Polls    int     `json:"polls"`
	Failures int     `json:"failures"`
	MaxMs    float64 `json:"max_ms"`
	LastErr  string  `json:"last_error,omitempty"`
}

// apiWatch asks the service's API every period whether it still answers
// (a failed or slow answer is counted against the phase) and keeps
// per-phase stats.
type apiWatch struct {
	c       *apiCounters
	timeout time.Duration
	mu      sync.Mutex
	cur     *APIStats
	last    error
	paused  bool // the service is being restarted on purpose (Restarter)
}

// pause stops (or resumes) polling: a restart's outage is the restart's
// figure (RestartStats.DownMs), not the API's failure.
func (pl *apiWatch) pause(on bool) {
	pl.mu.Lock()
	pl.paused = on
	pl.mu.Unlock()
}

func (pl *apiWatch) run(ctx context.Context, every time.Duration) {
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
		err := pl.c.Poll(pctx)
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
func (pl *apiWatch) switchPhase(start bool) *APIStats {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	prev := pl.cur
	pl.cur = nil
	if start {
		pl.cur = &APIStats{Request: pl.c.Name()}
	}
	return prev
}

func (pl *apiWatch) ok() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.last == nil
}

// newAPICounters polls the service's HTTP API (bound in the edge namespace at
// addr, reads behind the token) with the service's own client, dialling from
// inside the edge namespace: GET /v1/counters, whose answer must also show
// the table within its capacity.
func newAPICounters(addr, token string, edge *topo.NS) *apiCounters {
	return &apiCounters{client: &client.Client{
		Base:     "http://" + addr,
		Token:    token,
		Operator: "storm",
		HTTP:     &http.Client{Transport: &http.Transport{DialContext: parts.Dialer(edge), MaxIdleConnsPerHost: 1}},
	}}
}

type apiCounters struct {
	client *client.Client
}

func (p *apiCounters) Name() string { return "GET /v1/counters" }

// Poll asks once; an error is a failed poll.
func (p *apiCounters) Poll(ctx context.Context) error {
	r, err := p.client.Counters(ctx)
	if err != nil {
		return err
	}
	if r.Sources.Capacity == 0 || r.Sources.Tracked > int(r.Sources.Capacity) {
		return fmt.Errorf("api reports %d sources tracked, capacity %d", r.Sources.Tracked, r.Sources.Capacity)
	}
	return nil
}

// Close drops the client's idle connections; the service is stopped by the
// run.
func (p *apiCounters) Close() error {
	p.client.HTTP.CloseIdleConnections()
	return nil
}
