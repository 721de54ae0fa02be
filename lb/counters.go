package lb

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// Outcome is what connect4/6 and sendmsg4/6 did with a call; the order
// mirrors enum outcome in bpf/lb.c.
type Outcome uint8

const (
	// Translated: to a service; the destination became a backend.
	Translated Outcome = iota
	// NoBackend: to a service with no usable backend; the call was refused.
	NoBackend
	// NotService: not to a configured VIP, port and protocol; untouched.
	NotService
	// Denied: to a service, from a source outside its source ranges;
	// refused.
	Denied
	// NumOutcomes is how many outcomes there are.
	NumOutcomes
)

var outcomeNames = [...]string{"translated", "no_backend", "not_service", "denied"}

func (o Outcome) String() string { return outcomeNames[o] }

// Outcomes lists every outcome, for iteration.
func Outcomes() []Outcome { return []Outcome{Translated, NoBackend, NotService, Denied} }

// Counters are connect()/sendmsg() calls summed over CPUs: per service,
// translated and refused; and calls to no service at all.
type Counters struct {
	Services   map[lbconf.ServiceKey][NumOutcomes]uint64
	NotService uint64
}

// Counters reads the per-CPU counters.
func (l *LB) Counters() (Counters, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := Counters{Services: map[lbconf.ServiceKey][NumOutcomes]uint64{}}
	row := func(id uint32) ([NumOutcomes]uint64, error) {
		var out [NumOutcomes]uint64
		for o := range NumOutcomes {
			var per []uint64
			if err := l.objs.Counters.Lookup(id*uint32(NumOutcomes)+uint32(o), &per); err != nil {
				return out, fmt.Errorf("read counters: %w", err)
			}
			for _, v := range per {
				out[o] += v
			}
		}
		return out, nil
	}
	r, err := row(0)
	if err != nil {
		return c, err
	}
	c.NotService = r[NotService]
	for k, s := range l.services {
		r, err := row(s.id)
		if err != nil {
			return c, err
		}
		c.Services[k] = r
	}
	return c, nil
}

func (l *LB) zeroCounters(id uint32) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count CPUs: %w", err)
	}
	zeros := make([]uint64, n)
	for o := range NumOutcomes {
		if err := l.objs.Counters.Put(id*uint32(NumOutcomes)+uint32(o), zeros); err != nil {
			return fmt.Errorf("zero counters of service %d: %w", id, err)
		}
	}
	return nil
}
