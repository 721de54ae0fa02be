package service

import (
	"fmt"

	"xdpshield/lb"
)

// Log attribute keys of the balancer's start.
const (
	keyCgroup   = "cgroup"
	keyServices = "services"
	keyRefusal  = "refusal"
	keyMounted  = "mounted"
)

// startLB brings the socket balancer up when the configuration has
// services ([[lb.service]]): programs attached to the cgroup, services
// added. Its links are this process's: the balancer stops with the service
// (connected sockets keep their backends; new connects to a VIP go
// untranslated until serve runs again).
func (s *Service) startLB() error {
	l, err := lb.Start(s.cfg.LB)
	if err != nil {
		return fmt.Errorf("lb: %w", err)
	}
	if l == nil {
		return nil
	}
	s.lb = l
	s.log.Info("lb attached", keyCgroup, l.Cgroup, keyServices, len(l.Services()),
		keyRefusal, l.Refusal().Error(), keyMounted, l.Mounted)
	return nil
}

// LB is the socket balancer, nil when none is configured.
func (s *Service) LB() *lb.LB {
	if s.lb == nil {
		return nil
	}
	return s.lb.LB
}
