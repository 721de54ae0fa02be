package lbconf

import (
	"errors"
	"fmt"
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
// Interval) and in time (Timeout).
const (
	MinHealthInterval = 100 * time.Millisecond
	MaxHealthInterval = time.Hour
	MinHealthTimeout  = 10 * time.Millisecond
	MaxHealthStreak   = 100
)

// DefaultHealthCheck is what [lb.service.health] means with fields unset.
func DefaultHealthCheck() HealthCheck {
	return HealthCheck{Interval: 5 * time.Second, Timeout: time.Second, Fails: 3, Passes: 2}
}

// ValidateHealth checks service k's health check (nil: none): bounds, and
// a request for UDP only.
func ValidateHealth(k ServiceKey, h *HealthCheck) error {
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
