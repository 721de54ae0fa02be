package health

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// probeParallel bounds the probes in flight at once.
const probeParallel = 16

// ProbeCounts are one backend's probes since the balancer started.
type ProbeCounts struct {
	OK, Failed uint64
}

type probeState struct {
	ProbeCounts
	streak int // > 0: passes in a row; < 0: failures in a row
}

// Prober probes the backends of a balancer's services: it reads them
// through services (a snapshot, taken once a round) and quarantines or
// restores a backend through set.
type Prober struct {
	services func() []lbconf.Service
	set      func(k lbconf.ServiceKey, a netip.AddrPort, quarantined bool)

	mu    sync.Mutex
	stats map[lbconf.ServiceKey]map[netip.AddrPort]*probeState
	next  map[lbconf.ServiceKey]time.Time
}

// New returns a prober of the services services returns, which changes a
// backend's quarantine through set (one change each; set leaves alone a
// backend gone or already so).
func New(services func() []lbconf.Service, set func(k lbconf.ServiceKey, a netip.AddrPort, quarantined bool)) *Prober {
	return &Prober{services: services, set: set}
}

// Probes returns the probe counts of service k's backends.
func (p *Prober) Probes(k lbconf.ServiceKey) map[netip.AddrPort]ProbeCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[netip.AddrPort]ProbeCounts{}
	for a, st := range p.stats[k] {
		out[a] = st.ProbeCounts
	}
	return out
}

// Dialer makes a probe's connection: net.Dialer's DialContext by default;
// tests dial from a network namespace of their own.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Run probes the backends of every service with a HealthCheck until ctx
// is done, and quarantines and restores them. dial may be nil.
func (p *Prober) Run(ctx context.Context, dial Dialer) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	tick := time.NewTicker(lbconf.MinHealthInterval / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.round(ctx, dial, time.Now())
	}
}

type probeJob struct {
	k    lbconf.ServiceKey
	h    lbconf.HealthCheck
	addr netip.AddrPort
	ok   bool
}

// round probes the services that are due, at most probeParallel at once,
// and applies what changed.
func (p *Prober) round(ctx context.Context, dial Dialer, now time.Time) {
	var jobs []*probeJob
	svcs := p.services()
	p.mu.Lock()
	if p.next == nil {
		p.next = map[lbconf.ServiceKey]time.Time{}
		p.stats = map[lbconf.ServiceKey]map[netip.AddrPort]*probeState{}
	}
	present := map[lbconf.ServiceKey]bool{}
	for _, s := range svcs {
		k := s.ServiceKey
		present[k] = true
		if s.Health == nil {
			delete(p.next, k)
			delete(p.stats, k)
			continue
		}
		if now.Before(p.next[k]) {
			continue
		}
		p.next[k] = now.Add(s.Health.Interval)
		for _, b := range s.Backends {
			if !b.Draining {
				jobs = append(jobs, &probeJob{k: k, h: *s.Health, addr: b.Addr})
			}
		}
	}
	for k := range p.stats {
		if !present[k] {
			delete(p.stats, k)
			delete(p.next, k)
		}
	}
	p.mu.Unlock()
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
		k     lbconf.ServiceKey
		addr  netip.AddrPort
		quar  bool
		count int
	}
	var changes []change
	p.mu.Lock()
	for _, j := range jobs {
		m := p.stats[j.k]
		if m == nil {
			m = map[netip.AddrPort]*probeState{}
			p.stats[j.k] = m
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
	p.mu.Unlock()
	for _, c := range changes {
		p.set(c.k, c.addr, c.quar)
	}
}

// probe is one check of backend a: a TCP connect, or a UDP request
// answered, within h.Timeout.
func probe(ctx context.Context, dial Dialer, p lbconf.Proto, a netip.AddrPort, h lbconf.HealthCheck) error {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	c, err := dial(ctx, string(p), a.String())
	if err != nil {
		return err
	}
	defer c.Close()
	if p == lbconf.TCP {
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
