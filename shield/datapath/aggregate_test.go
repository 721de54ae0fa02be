package datapath

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/sim"
)

// TestAggregateLimit (issue 26, finding 2): many sources each under their
// own limit can together exceed what a service answers; the aggregate
// limit of a protected destination caps them all, serving sources within
// their rate first and shedding strangers and sources at their limit
// first.
//
// udp/53 has an aggregate of 1,000/s, burst 200: a stranger, or a source
// whose own bucket is left under half full (it sends at or over its
// rate), passes only while more than 100 are left (the reserve, half the
// burst). Every source 1,000/s, burst 100. At one instant: sources a, b,
// c come in (strangers, admitted: 197 left). a floods: its first 49
// leave its bucket at least half full and pass (148 left); the next 48
// leave it under half and pass while the aggregate is over its reserve
// (100 left); its last 2 are shed though its own bucket still had them.
// A stranger is shed (100 is not over the reserve) though the admission
// bucket is full. b, within its rate, gets 49 (51 left); its 50th would
// leave its bucket under half: shed. c gets 49 (2 left). tcp/443 has no
// aggregate: c's SYNs pass. 50 ms on (every bucket earns 50): the
// stranger is still shed (52 left), a's next (its bucket under half)
// too, b's 10 within its rate pass. Every count follows from the limits
// and what was sent; without the aggregate every udp/53 frame here
// passes.
func TestAggregateLimit(t *testing.T) {
	l := config.DefaultLimits()
	l.Rate, l.Burst = 1000, 100
	l.Protected = []config.Destination{{Proto: counter.ProtoUDP, Port: 53}, {Proto: counter.ProtoTCP, Port: 443}}
	l.Aggregates = []config.Aggregate{{Destination: config.Destination{Proto: counter.ProtoUDP, Port: 53}, Rate: 1000, Burst: 200}}
	s := load(t, 4096, l)
	require.Equal(t, l.Aggregates, s.Limits().Aggregates, "the aggregate limits read back")
	dst := netipAddr("198.18.255.254")
	dns := func(src string) []byte {
		return sim.Frame{L4: sim.UDP, Src: netipAddr(src), Dst: dst, SrcPort: 5353, DstPort: 53}.Bytes()
	}
	a, b, c, stranger := dns("198.18.26.1"), dns("198.18.26.2"), dns("198.18.26.3"), dns("198.18.26.4")
	syn := sim.Frame{L4: sim.TCP, Src: netipAddr("198.18.26.3"), Dst: dst, SrcPort: 40000, DstPort: 443}.Bytes()
	udp, tcp := counter.ProtoUDP, counter.ProtoTCP
	later := sec + 50*time.Millisecond
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		{Name: "a comes in", At: sec, Frame: a, Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
		{Name: "b comes in", At: sec, Frame: b, Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
		{Name: "c comes in", At: sec, Frame: c, Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
		{Name: "a within its rate", At: sec, Frame: a, Times: 49, Want: sim.Pass, Delta: N(49, pass, counter.ReasonOK, udp)},
		{Name: "a at its limit, over the reserve", At: sec, Frame: a, Times: 48, Want: sim.Pass, Delta: N(48, pass, counter.ReasonOK, udp)},
		{Name: "a at its limit, at the reserve: shed", At: sec, Frame: a, Times: 2, Want: sim.Drop, Delta: N(2, drop, counter.ReasonLimit, udp)},
		{Name: "a stranger is shed first", At: sec, Frame: stranger, Want: sim.Drop, Delta: One(drop, counter.ReasonAdmission, udp)},
		{Name: "b within its rate is served", At: sec, Frame: b, Times: 49, Want: sim.Pass, Delta: N(49, pass, counter.ReasonOK, udp)},
		{Name: "b at its limit: shed", At: sec, Frame: b, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
		{Name: "c within its rate is served", At: sec, Frame: c, Times: 49, Want: sim.Pass, Delta: N(49, pass, counter.ReasonOK, udp)},
		{Name: "tcp/443 has no aggregate", At: sec, Frame: syn, Times: 5, Want: sim.Pass, Delta: N(5, pass, counter.ReasonOK, tcp)},
		{Name: "50 ms on: the stranger still shed", At: later, Frame: stranger, Want: sim.Drop, Delta: One(drop, counter.ReasonAdmission, udp)},
		{Name: "50 ms on: a at its limit still shed", At: later, Frame: a, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
		{Name: "50 ms on: b within its rate served", At: later, Frame: b, Times: 10, Want: sim.Pass, Delta: N(10, pass, counter.ReasonOK, udp)},
	}}.Run(t)
}
