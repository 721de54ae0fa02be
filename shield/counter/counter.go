package counter

import (
	"fmt"

	"github.com/xdpshield/xdpshield/bpf"
)

// Verdict, Reason and Proto index the counters. Their values are the C
// enums' (bpf/shield.h), as bpf2go emits them: a reordered enum moves these
// constants with it, a removed one fails the build, and TestContract checks
// the names below against the object's BTF.
type (
	Verdict uint8
	Reason  uint8
	Proto   uint8
)

const (
	Pass        = Verdict(bpf.ShieldVerdictVERDICT_PASS)
	Drop        = Verdict(bpf.ShieldVerdictVERDICT_DROP)
	numVerdicts = Verdict(bpf.ShieldVerdictVERDICT_MAX)
)

const (
	ReasonOK          = Reason(bpf.ShieldReasonREASON_OK)
	ReasonAllow       = Reason(bpf.ShieldReasonREASON_ALLOW)
	ReasonDeny        = Reason(bpf.ShieldReasonREASON_DENY)
	ReasonLimit       = Reason(bpf.ShieldReasonREASON_LIMIT)
	ReasonAdmission   = Reason(bpf.ShieldReasonREASON_ADMISSION)
	ReasonNotIP       = Reason(bpf.ShieldReasonREASON_NOT_IP)
	ReasonMalformed   = Reason(bpf.ShieldReasonREASON_MALFORMED)
	ReasonSpoofed     = Reason(bpf.ShieldReasonREASON_SPOOFED)     // a source no frame from the wire carries: an own address, IPv4-mapped IPv6
	ReasonUnprotected = Reason(bpf.ShieldReasonREASON_UNPROTECTED) // return traffic of the edge's own connections: judged by the unprotected limits
	numReasons        = Reason(bpf.ShieldReasonREASON_MAX)
)

const (
	ProtoTCP   = Proto(bpf.ShieldProtoPROTO_TCP)
	ProtoUDP   = Proto(bpf.ShieldProtoPROTO_UDP)
	ProtoICMP  = Proto(bpf.ShieldProtoPROTO_ICMP)
	ProtoOther = Proto(bpf.ShieldProtoPROTO_OTHER)
	numProtos  = Proto(bpf.ShieldProtoPROTO_MAX)
)

// The names are the metrics' label values and the simulator's keys, keyed
// by value: two constants of one value fail the build, a value without a
// name fails TestContract.
var (
	verdictNames = [numVerdicts]string{Pass: "pass", Drop: "drop"}
	reasonNames  = [numReasons]string{ReasonOK: "ok", ReasonAllow: "allow", ReasonDeny: "deny", ReasonLimit: "limit",
		ReasonAdmission: "admission", ReasonNotIP: "not_ip", ReasonMalformed: "malformed", ReasonSpoofed: "spoofed",
		ReasonUnprotected: "unprotected"}
	protoNames = [numProtos]string{ProtoTCP: "tcp", ProtoUDP: "udp", ProtoICMP: "icmp", ProtoOther: "other"}
)

func (v Verdict) String() string { return name(verdictNames[:], v, "verdict") }
func (r Reason) String() string  { return name(reasonNames[:], r, "reason") }
func (p Proto) String() string   { return name(protoNames[:], p, "proto") }

// name is names[i], or kind(i) for a value without one.
func name[T ~uint8](names []string, i T, kind string) string {
	if int(i) < len(names) && names[i] != "" {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(i))
}

// Verdicts, Reasons and Protos list every value in order, for iteration.
func Verdicts() []Verdict { return values[Verdict](numVerdicts) }
func Reasons() []Reason   { return values[Reason](numReasons) }
func Protos() []Proto     { return values[Proto](numProtos) }

func values[T ~uint8](n T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = T(i)
	}
	return out
}

// Index is the counters map's key of (v, r, p): the formula of
// account() in bpf/shield.c, and the only one on this side.
func Index(v Verdict, r Reason, p Proto) uint32 {
	return (uint32(v)*uint32(numReasons)+uint32(r))*uint32(numProtos) + uint32(p)
}

// Size is the counters map's size (MAX_COUNTERS).
const Size = int(numVerdicts) * int(numReasons) * int(numProtos)

// Key is a counters map key's (verdict, reason, protocol).
type Key struct {
	V Verdict
	R Reason
	P Proto
}

// Keys maps a counters map key back to (v, r, p).
var Keys = func() (out [Size]Key) {
	for _, v := range Verdicts() {
		for _, r := range Reasons() {
			for _, p := range Protos() {
				out[Index(v, r, p)] = Key{v, r, p}
			}
		}
	}
	return out
}()

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

// Share is the part of all packets counted with verdict v and reason r,
// over protocols: how many took one path (0 when nothing was counted).
func (c *Counters) Share(v Verdict, r Reason) float64 {
	var on uint64
	for _, x := range c[v][r] {
		on += x
	}
	return float64(on) / float64(max(c.Total(), 1))
}

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
