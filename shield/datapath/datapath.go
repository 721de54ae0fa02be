package datapath

import (
	"fmt"

	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/sim"
)

// Key names one shield counter as scenarios and goldens write it:
// "verdict/reason/proto", e.g. "drop/limit/udp".
func Key(v counter.Verdict, r counter.Reason, p counter.Proto) string {
	return fmt.Sprintf("%s/%s/%s", v, r, p)
}

// CounterMap turns the shield's counters into named counts (non-zero only).
func CounterMap(c counter.Counters) map[string]uint64 {
	m := map[string]uint64{}
	c.Each(func(v counter.Verdict, r counter.Reason, p counter.Proto, n uint64) {
		if n != 0 {
			m[Key(v, r, p)] = n
		}
	})
	return m
}

// Target is the simulator's target for a loaded shield: its program, its
// counters by Key, and its virtual clock when it was loaded with
// config.ClockVirtual.
func Target(s *shield.Shield) sim.Target {
	t := sim.Target{
		Prog: s.Program(),
		Counters: func() (map[string]uint64, error) {
			c, err := s.Counters()
			if err != nil {
				return nil, err
			}
			return CounterMap(c), nil
		},
	}
	if s.Clock() == config.ClockVirtual {
		t.SetTime = s.SetTime
	}
	return t
}

// One is the counter delta of one frame: {Key(v, r, p): 1}.
func One(v counter.Verdict, r counter.Reason, p counter.Proto) map[string]uint64 {
	return map[string]uint64{Key(v, r, p): 1}
}

// N is the counter delta of n frames: {Key(v, r, p): n}.
func N(n uint64, v counter.Verdict, r counter.Reason, p counter.Proto) map[string]uint64 {
	return map[string]uint64{Key(v, r, p): n}
}

// FixtureConfig is the shield configuration a fixture of fixtures/sim
// replays under (the Config of its sim.Golden): the shield's own Limits
// (their JSON keys inline), the table size and the lists as CIDRs.
type FixtureConfig struct {
	TableSize uint32 `json:"table_size"`
	config.Limits
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}
