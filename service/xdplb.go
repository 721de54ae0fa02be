package service

import (
	"fmt"

	"github.com/cilium/ebpf"

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
		if s.cfg.Chain != "" {
			return s.chain(next)
		}
		return xdplb.Unchain(next)
	}
	if s.cfg.Chain != "" {
		return fmt.Errorf("chain %s and [xdplb] VIPs both want the shield's one next program", s.cfg.Chain)
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

// chain puts the pinned XDP program s.cfg.Chain behind the shield: one
// program among others on an interface that has one XDP attachment. The
// program array holds its own reference, so the program keeps running
// while serve is down and after its pin is removed; a start without
// Chain (and without VIPs) takes it out.
func (s *Service) chain(next *ebpf.Map) error {
	prog, err := ebpf.LoadPinnedProgram(s.cfg.Chain, nil)
	if err != nil {
		return fmt.Errorf("chain: open the pinned program %s: %w", s.cfg.Chain, err)
	}
	defer prog.Close()
	if prog.Type() != ebpf.XDP {
		return fmt.Errorf("chain: %s is a %s program, not XDP", s.cfg.Chain, prog.Type())
	}
	if err := next.Put(uint32(0), prog); err != nil {
		// The kernel refuses (EINVAL) a program its tail call cannot
		// take: the shield's kind is XDP with the expected attach type
		// BPF_XDP (what libbpf's SEC("xdp") loads) and no frags.
		return fmt.Errorf("chain: put %s behind the shield (it must be XDP loaded with expected attach type BPF_XDP, as SEC(\"xdp\") is, without frags): %w", s.cfg.Chain, err)
	}
	s.log.Info("chained behind the shield", keyIface, s.att.Iface, "program", s.cfg.Chain)
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
