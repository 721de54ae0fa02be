package lb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// HealthCheck is a service's active health check: every Interval each
// backend that is not draining is probed from the service's process, a
// TCP connect (TCP services) or a datagram Request answered within Timeout
// (UDP services; any answer passes, an ICMP unreachable or silence fails).
// Fails failures in a row quarantine a backend (it leaves the choice
// table and affinity, as draining does, but by itself); Passes successes
// in a row make it active again. A draining backend is not probed.
type HealthCheck struct {
	Interval time.Duration
	Timeout  time.Duration
	Fails    int
	Passes   int
	Request  []byte // UDP only
}

// Health check bounds: probes stay bounded in rate (one per backend per
// Interval, at most probeParallel at once) and in time (Timeout).
const (
	MinHealthInterval = 100 * time.Millisecond
	MaxHealthInterval = time.Hour
	MinHealthTimeout  = 10 * time.Millisecond
	MaxHealthStreak   = 100
	probeParallel     = 16
)

// DefaultHealthCheck is what [lb.service.health] means with fields unset.
func DefaultHealthCheck() HealthCheck {
	return HealthCheck{Interval: 5 * time.Second, Timeout: time.Second, Fails: 3, Passes: 2}
}

func validateHealth(k ServiceKey, h *HealthCheck) error {
	if h == nil {
		return nil
	}
	var errs []error
	if h.Interval < MinHealthInterval || h.Interval > MaxHealthInterval {
		errs = append(errs, fmt.Errorf("service %s: health interval %v out of range [%v, %v]", k, h.Interval, MinHealthInterval, MaxHealthInterval))
	}
	if h.Timeout < MinHealthTimeout || h.Timeout > h.Interval {
		errs = append(errs, fmt.Errorf("service %s: health timeout %v out of range [%v, the interval]", k, h.Timeout, MinHealthTimeout))
	}
	if h.Fails < 1 || h.Fails > MaxHealthStreak || h.Passes < 1 || h.Passes > MaxHealthStreak {
		errs = append(errs, fmt.Errorf("service %s: health fails %d and passes %d: want 1..%d", k, h.Fails, h.Passes, MaxHealthStreak))
	}
	if k.Proto == UDP && len(h.Request) == 0 {
		errs = append(errs, fmt.Errorf("service %s: a UDP health check needs a request (udp_request), the datagram a backend answers", k))
	}
	if k.Proto == TCP && len(h.Request) > 0 {
		errs = append(errs, fmt.Errorf("service %s: udp_request on a TCP service (its check is a connect)", k))
	}
	return errors.Join(errs...)
}

// ProbeCounts are one backend's probes since the balancer started.
type ProbeCounts struct {
	OK, Failed uint64
}

type probeState struct {
	ProbeCounts
	streak int // > 0: passes in a row; < 0: failures in a row
}

type healthState struct {
	mu    sync.Mutex
	stats map[ServiceKey]map[netip.AddrPort]*probeState
	next  map[ServiceKey]time.Time
}

// Probes returns the probe counts of service k's backends.
func (l *LB) Probes(k ServiceKey) map[netip.AddrPort]ProbeCounts {
	l.health.mu.Lock()
	defer l.health.mu.Unlock()
	out := map[netip.AddrPort]ProbeCounts{}
	for a, st := range l.health.stats[k] {
		out[a] = st.ProbeCounts
	}
	return out
}

// Dialer makes a probe's connection: net.Dialer's DialContext by default;
// tests dial from a network namespace of their own.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// RunHealth probes the backends of every service with a HealthCheck until
// ctx is done, and quarantines and restores them. dial may be nil.
func (l *LB) RunHealth(ctx context.Context, dial Dialer) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	tick := time.NewTicker(MinHealthInterval / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.healthRound(ctx, dial, time.Now())
	}
}

type probeJob struct {
	k    ServiceKey
	h    HealthCheck
	addr netip.AddrPort
	ok   bool
}

// healthRound probes the services that are due, at most probeParallel at
// once, and applies what changed.
func (l *LB) healthRound(ctx context.Context, dial Dialer, now time.Time) {
	var jobs []*probeJob
	l.mu.Lock()
	l.health.mu.Lock()
	if l.health.next == nil {
		l.health.next = map[ServiceKey]time.Time{}
		l.health.stats = map[ServiceKey]map[netip.AddrPort]*probeState{}
	}
	for k, s := range l.services {
		if s.health == nil {
			delete(l.health.next, k)
			delete(l.health.stats, k)
			continue
		}
		if now.Before(l.health.next[k]) {
			continue
		}
		l.health.next[k] = now.Add(s.health.Interval)
		for _, b := range s.backends {
			if !b.draining {
				jobs = append(jobs, &probeJob{k: k, h: *s.health, addr: b.addr})
			}
		}
	}
	for k := range l.health.stats {
		if _, ok := l.services[k]; !ok {
			delete(l.health.stats, k)
			delete(l.health.next, k)
		}
	}
	l.health.mu.Unlock()
	l.mu.Unlock()
	if len(jobs) == 0 {
		return
	}

	sem := make(chan struct{}, probeParallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			j.ok = probe(ctx, dial, j.k.Proto, j.addr, j.h) == nil
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}

	type change struct {
		k     ServiceKey
		addr  netip.AddrPort
		quar  bool
		count int
	}
	var changes []change
	l.health.mu.Lock()
	for _, j := range jobs {
		m := l.health.stats[j.k]
		if m == nil {
			m = map[netip.AddrPort]*probeState{}
			l.health.stats[j.k] = m
		}
		st := m[j.addr]
		if st == nil {
			st = &probeState{}
			m[j.addr] = st
		}
		if j.ok {
			st.OK++
			st.streak = max(st.streak, 0) + 1
			if st.streak == j.h.Passes {
				changes = append(changes, change{j.k, j.addr, false, st.streak})
			}
		} else {
			st.Failed++
			st.streak = min(st.streak, 0) - 1
			if -st.streak == j.h.Fails {
				changes = append(changes, change{j.k, j.addr, true, -st.streak})
			}
		}
	}
	l.health.mu.Unlock()
	for _, c := range changes {
		l.setQuarantined(c.k, c.addr, c.quar)
	}
}

// setQuarantined quarantines or restores one backend, as one change; a
// backend gone or already so is left alone.
func (l *LB) setQuarantined(k ServiceKey, a netip.AddrPort, q bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.services[k]
	if !ok {
		return
	}
	i := s.find(a)
	if i < 0 || s.backends[i].quarantined == q {
		return
	}
	next := l.cloneServices()
	next[k].backends[i].quarantined = q
	if err := l.commit(next); err != nil {
		l.healthErr = err
	}
}

// probe is one check of backend a: a TCP connect, or a UDP request
// answered, within h.Timeout.
func probe(ctx context.Context, dial Dialer, p Proto, a netip.AddrPort, h HealthCheck) error {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	c, err := dial(ctx, string(p), a.String())
	if err != nil {
		return err
	}
	defer c.Close()
	if p == TCP {
		return nil
	}
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	if _, err := c.Write(h.Request); err != nil {
		return err
	}
	buf := make([]byte, 512)
	_, err = c.Read(buf)
	return err
}
