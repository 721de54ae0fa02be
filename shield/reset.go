package shield

import (
	"fmt"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
)

// Reset puts an unpinned shield back in the state Load left it in, with
// limits l (zero: DefaultLimits) and the ephemeral ports Load was given:
// no tracked source, every counter zero, empty lists and own addresses, the
// program's writable variables (the virtual clock among them) zero, full
// admission buckets and a fresh configuration. The loaded program is kept:
// verifying it again costs seconds a load in a VM under TCG, where the
// simulator runs hundreds of independent cases (shield/datapath). What it
// leaves is what Load leaves but for three things no reader sees: the hash
// keys (the table is empty, so no entry was placed with them), the rules'
// hit counters (user space zeroes a rule before giving it to an entry:
// rule_counts), and the inner map the last configuration swap replaced (kept
// until the next swap, as after any change).
//
// Nothing may use s while Reset runs, and a capture running is stopped. A
// pinned shield is refused: its maps are the service's state, shared with
// the program attached.
func (s *Shield) Reset(l config.Limits) error {
	if s.pinPath != "" {
		return fmt.Errorf("reset: the shield is pinned at %s", s.pinPath)
	}
	if l.IsZero() {
		l = config.DefaultLimits()
	} else if err := l.Validate(); err != nil {
		return config.Invalid(fmt.Errorf("limits: %w", err))
	}
	l = l.WithDefaults()
	if err := l.CheckTick(s.clock, s.tickNs); err != nil {
		return config.Invalid(fmt.Errorf("limits: %w", err))
	}
	s.StopCapture()
	if err := s.clearMaps(); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	s.filterMu.Lock()
	defer s.filterMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clockNote, s.recovered, s.migrated = "", nil, nil
	s.limits, s.eph, s.gen, s.filter = config.Limits{}, s.loadEph, 0, 0
	s.afterFilterWalk = nil
	if err := s.loadSnapshots(); err != nil {
		return err
	}
	if err := s.loadRules(); err != nil {
		return err
	}
	if err := s.start(l); err != nil {
		return err
	}
	return s.settleLists()
}

// clearMaps empties or zeroes every map of the program but the
// configuration's outer array (start swaps a new one in), the capture's
// perf buffer and the rules' hit counters (see Reset), and zeroes its
// writable variables.
func (s *Shield) clearMaps() error {
	return bpf.Clear(&s.objs.ShieldMaps, &s.objs.ShieldVariables, s.objs.RuleCounts, s.objs.Captured, s.objs.ConfigMap)
}
