package lb

import (
	"context"
	"net/netip"

	"github.com/xdpshield/xdpshield/lb/health"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// Probes returns the probe counts of service k's backends.
func (l *LB) Probes(k lbconf.ServiceKey) map[netip.AddrPort]health.ProbeCounts {
	return l.health.Probes(k)
}

// RunHealth probes the backends of every service with a
// lbconf.HealthCheck until ctx is done, and quarantines and restores them
// (package health). dial may be nil: net.Dialer's.
func (l *LB) RunHealth(ctx context.Context, dial health.Dialer) {
	l.health.Run(ctx, dial)
}

// setQuarantined quarantines or restores one backend, as one change; a
// backend gone or already so is left alone.
func (l *LB) setQuarantined(k lbconf.ServiceKey, a netip.AddrPort, q bool) {
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
