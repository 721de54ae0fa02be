package shield

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Verdict, Reason and Proto index the counters; their order mirrors the enums
// in bpf/shield.h.
type (
	Verdict uint8
	Reason  uint8
	Proto   uint8
)

const (
	Pass Verdict = iota
	Drop
	numVerdicts
)

const (
	ReasonOK Reason = iota
	ReasonAllow
	ReasonDeny
	ReasonLimit
	ReasonAdmission
	ReasonNotIP
	ReasonMalformed
	ReasonSpoofed     // a source no frame from the wire carries: an own address, IPv4-mapped IPv6
	ReasonUnprotected // to a destination not protected: judged by the unprotected limits
	numReasons
)

const (
	ProtoTCP Proto = iota
	ProtoUDP
	ProtoICMP
	ProtoOther
	numProtos
)

var (
	verdictNames = [...]string{"pass", "drop"}
	reasonNames  = [...]string{"ok", "allow", "deny", "limit", "admission", "not_ip", "malformed", "spoofed", "unprotected"}
	protoNames   = [...]string{"tcp", "udp", "icmp", "other"}
)

func (v Verdict) String() string { return verdictNames[v] }
func (r Reason) String() string  { return reasonNames[r] }
func (p Proto) String() string   { return protoNames[p] }

// Verdicts, Reasons and Protos list every value, for iteration.
func Verdicts() []Verdict { return []Verdict{Pass, Drop} }
func Reasons() []Reason {
	return []Reason{ReasonOK, ReasonAllow, ReasonDeny, ReasonLimit, ReasonAdmission, ReasonNotIP, ReasonMalformed,
		ReasonSpoofed, ReasonUnprotected}
}
func Protos() []Proto { return []Proto{ProtoTCP, ProtoUDP, ProtoICMP, ProtoOther} }

// Counters are packet counts summed over CPUs, by verdict, reason and protocol.
type Counters [numVerdicts][numReasons][numProtos]uint64

// Reason sums the packets given reason r, over verdicts and protocols.
func (c *Counters) Reason(r Reason) uint64 {
	var n uint64
	for v := range c {
		for _, x := range c[v][r] {
			n += x
		}
	}
	return n
}

// Verdict sums the packets given verdict v.
func (c *Counters) Verdict(v Verdict) uint64 {
	var n uint64
	for r := range c[v] {
		for _, x := range c[v][r] {
			n += x
		}
	}
	return n
}

// Total sums every packet seen.
func (c *Counters) Total() uint64 { return c.Verdict(Pass) + c.Verdict(Drop) }

// Sub returns c - o, entry by entry (the counters only grow).
func (c Counters) Sub(o Counters) Counters {
	for v := range c {
		for r := range c[v] {
			for p := range c[v][r] {
				c[v][r][p] -= o[v][r][p]
			}
		}
	}
	return c
}

// Each calls fn for every non-zero counter.
func (c *Counters) Each(fn func(Verdict, Reason, Proto, uint64)) {
	for v := range c {
		for r := range c[v] {
			for p, x := range c[v][r] {
				if x != 0 {
					fn(Verdict(v), Reason(r), Proto(p), x)
				}
			}
		}
	}
}

// readCounters sums readCountersByCPU over CPUs.
func readCounters(m *ebpf.Map) (Counters, error) {
	var c Counters
	per, err := readCountersByCPU(m)
	if err != nil {
		return c, err
	}
	for _, pc := range per {
		pc.Each(func(v Verdict, r Reason, p Proto, n uint64) { c[v][r][p] += n })
	}
	return c, nil
}

// CountersByCPU reads the packet counters of each possible CPU, unsummed.
func (s *Shield) CountersByCPU() ([]Counters, error) { return readCountersByCPU(s.objs.Counters) }

func readCountersByCPU(m *ebpf.Map) ([]Counters, error) {
	// One batch lookup (5.6+) reads every counter of every CPU: a
	// scenario reads the counters around each frame, and a lookup per
	// counter is 56 syscalls, slow under emulation (the VM matrix).
	n := int(numVerdicts) * int(numReasons) * int(numProtos)
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
	out := make([]Counters, cpus)
	for i, idx := range keys {
		v := Verdict(int(idx) / (int(numReasons) * int(numProtos)))
		r := Reason(int(idx) / int(numProtos) % int(numReasons))
		p := Proto(int(idx) % int(numProtos))
		for cpu := range cpus {
			out[cpu][v][r][p] = vals[i*cpus+cpu]
		}
	}
	return out, nil
}

// readCountersOneByOne reads the counters with a lookup each, where the
// kernel has no batch lookup for the map.
func readCountersOneByOne(m *ebpf.Map) ([]Counters, error) {
	var out []Counters
	var perCPU []uint64
	for v := range numVerdicts {
		for r := range numReasons {
			for p := range numProtos {
				idx := uint32((int(v)*int(numReasons)+int(r))*int(numProtos) + int(p))
				if err := m.Lookup(idx, &perCPU); err != nil {
					return nil, fmt.Errorf("read counter %d: %w", idx, err)
				}
				if out == nil {
					out = make([]Counters, len(perCPU))
				}
				for cpu, x := range perCPU {
					out[cpu][v][r][p] = x
				}
			}
		}
	}
	return out, nil
}
