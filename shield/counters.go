package shield

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/shield/counter"
)

// readCounters sums readCountersByCPU over CPUs.
func readCounters(m *ebpf.Map) (counter.Counters, error) {
	var c counter.Counters
	per, err := readCountersByCPU(m)
	if err != nil {
		return c, err
	}
	for _, pc := range per {
		pc.Each(func(v counter.Verdict, r counter.Reason, p counter.Proto, n uint64) { c[v][r][p] += n })
	}
	return c, nil
}

// CountersByCPU reads the packet counters of each possible CPU, unsummed.
func (s *Shield) CountersByCPU() ([]counter.Counters, error) {
	return readCountersByCPU(s.objs.Counters)
}

func readCountersByCPU(m *ebpf.Map) ([]counter.Counters, error) {
	// One batch lookup (5.6+) reads every counter of every CPU: a
	// scenario reads the counters around each frame, and a lookup per
	// counter is 56 syscalls, slow under emulation (the VM matrix).
	n := counter.Size
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	keys := make([]uint32, n)
	vals := make([]uint64, n*cpus)
	var cursor ebpf.MapBatchCursor
	got, err := m.BatchLookup(&cursor, keys, vals, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		// Debian's 5.10 has no batch operations on per-CPU arrays.
		return readCountersOneByOne(m)
	}
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	if got != n {
		return nil, fmt.Errorf("read counters: %d of %d read", got, n)
	}
	out := make([]counter.Counters, cpus)
	for i, idx := range keys {
		if int(idx) >= counter.Size {
			return nil, fmt.Errorf("read counters: key %d of %d", idx, counter.Size)
		}
		k := counter.Keys[idx]
		v, r, p := k.V, k.R, k.P
		for cpu := range cpus {
			out[cpu][v][r][p] = vals[i*cpus+cpu]
		}
	}
	return out, nil
}

// readCountersOneByOne reads the counters with a lookup each, where the
// kernel has no batch lookup for the map.
func readCountersOneByOne(m *ebpf.Map) ([]counter.Counters, error) {
	var out []counter.Counters
	var perCPU []uint64
	for _, v := range counter.Verdicts() {
		for _, r := range counter.Reasons() {
			for _, p := range counter.Protos() {
				idx := counter.Index(v, r, p)
				if err := m.Lookup(idx, &perCPU); err != nil {
					return nil, fmt.Errorf("read counter %d: %w", idx, err)
				}
				if out == nil {
					out = make([]counter.Counters, len(perCPU))
				}
				for cpu, x := range perCPU {
					out[cpu][v][r][p] = x
				}
			}
		}
	}
	return out, nil
}
