package service

import (
	"fmt"
	"path/filepath"

	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/lb/lbpin"
)

// Log attribute keys of the balancer's start.
const (
	keyCgroup   = "cgroup"
	keyServices = "services"
	keyRefusal  = "refusal"
	keyMounted  = "mounted"
	keyAdopted  = "adopted"
)

// startLB brings the socket balancer up when the configuration has
// services ([[lb.service]]): programs attached to the cgroup, services
// added, links and maps pinned in the interface's pin directory (lb/), so
// the balancer keeps translating while serve is down; a restart adopts
// them and applies the configured services whole. With no services
// configured, a balancer pinned by an earlier run is removed: the
// configuration says there is none.
func (s *Service) startLB() error {
	if !s.cfg.LB.Enabled() {
		if lbpin.Pinned(s.att.PinDir) {
			dir := filepath.Join(s.att.PinDir, lbpin.Subdir)
			if err := lbpin.Remove(dir); err != nil {
				return fmt.Errorf("lb: no services configured; remove the pinned balancer: %w", err)
			}
			s.log.Info("lb removed: no services configured; the pinned balancer was detached", keyPinDir, dir)
		}
		// A first start that died half-way.
		if err := lbpin.Remove(filepath.Join(s.att.PinDir, lbpin.StagingSubdir)); err != nil {
			return fmt.Errorf("lb: remove an interrupted start's pins: %w", err)
		}
		return nil
	}
	l, err := lb.StartPinned(s.cfg.LB, s.att.PinDir)
	if err != nil {
		return fmt.Errorf("lb: %w", err)
	}
	s.lb = l
	for _, n := range l.Notes {
		s.log.Warn("lb", keyNote, n)
	}
	s.log.Info("lb attached", keyCgroup, l.Cgroup, keyServices, len(l.Services()),
		keyRefusal, l.Refusal().Error(), keyMounted, l.Mounted, keyPinDir, l.PinDir, keyAdopted, l.Adopted)
	return nil
}

// LB is the socket balancer, nil when none is configured.
func (s *Service) LB() *lb.LB {
	if s.lb == nil {
		return nil
	}
	return s.lb.LB
}
