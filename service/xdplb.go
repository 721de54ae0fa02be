package service

import (
	"fmt"

	"github.com/xdpshield/xdpshield/xdplb"
)

const keyVIPs = "vips"

// startXDPLB brings the XDP balancer up behind the shield when the
// configuration names VIPs ([xdplb]): loaded, configured whole, and put in
// the shield's pinned `next` program array, so the shield tail-calls it
// for what it passes. The array is pinned with the shield's maps: the
// balancer keeps balancing while serve is down, and a restart loads a new
// one in its place (the connection table starts empty; a table computed
// from the same backends is the same table, so flows stay put). With no
// VIPs configured, a balancer chained by an earlier run is taken out.
func (s *Service) startXDPLB() error {
	next := s.att.Shield.Next()
	if next == nil {
		return fmt.Errorf("xdplb: the attached shield has no program array for a balancer")
	}
	if len(s.cfg.XDPLB.VIPs) == 0 {
		return xdplb.Unchain(next)
	}
	b, err := xdplb.Load()
	if err != nil {
		return fmt.Errorf("xdplb: %w", err)
	}
	if err := b.Apply(s.cfg.XDPLB); err != nil {
		b.Close()
		return fmt.Errorf("xdplb: %w", err)
	}
	if err := b.Chain(next); err != nil {
		b.Close()
		return fmt.Errorf("xdplb: %w", err)
	}
	s.xdplb = b
	s.log.Info("xdplb chained behind the shield", keyIface, s.att.Iface, keyVIPs, len(s.cfg.XDPLB.VIPs))
	return nil
}

// XDPLB is the XDP balancer, nil when none is configured.
func (s *Service) XDPLB() *xdplb.Balancer { return s.xdplb }

func (s *Service) closeXDPLB() error {
	if s.xdplb == nil {
		return nil
	}
	return s.xdplb.Close() // the pinned program array keeps it balancing
}
