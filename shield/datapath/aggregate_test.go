package datapath

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/sim"
)

// TestAggregateLimit (issue 26, finding 2): many sources each under their
// own limit can together exceed what a service answers; the aggregate
// limit of a protected destination caps them all, serving established
// sources first and shedding strangers first.
//
// udp/53 has an aggregate of 1,000/s, burst 200 (a stranger passes only
// while more than 100 are left); every source 1,000/s, burst 100. At one
// instant: three sources come in (strangers, admitted: 197 left), the
// first spends its burst (98 left), a fourth stranger is shed (98 is not
// over the reserve of 100) though the admission bucket is full, the
// second source gets 98 of its 99 (the aggregate is empty) and the third
// none of 10, though both are within their own burst. tcp/443 has no
// aggregate: the third source's SYNs pass. 100 ms later the aggregate
// has earned 100: the stranger is still shed (100 is not over 100), the
// third source's 10 pass. Every count follows from the limits and what
// was sent; without the aggregate every udp/53 frame here passes.
func TestAggregateLimit(t *testing.T) {
	l := shield.DefaultLimits()
	l.Rate, l.Burst = 1000, 100
	l.Protected = []shield.Destination{{Proto: shield.ProtoUDP, Port: 53}, {Proto: shield.ProtoTCP, Port: 443}}
	l.Aggregates = []shield.Aggregate{{Destination: shield.Destination{Proto: shield.ProtoUDP, Port: 53}, Rate: 1000, Burst: 200}}
	s := load(t, 4096, l)
	require.Equal(t, l.Aggregates, s.Limits().Aggregates, "the aggregate limits read back")
	dst := netipAddr("198.18.255.254")
	dns := func(src string) []byte {
		return sim.Frame{L4: sim.UDP, Src: netipAddr(src), Dst: dst, SrcPort: 5353, DstPort: 53}.Bytes()
	}
	a, b, c, stranger := dns("198.18.26.1"), dns("198.18.26.2"), dns("198.18.26.3"), dns("198.18.26.4")
	syn := sim.Frame{L4: sim.TCP, Src: netipAddr("198.18.26.3"), Dst: dst, SrcPort: 40000, DstPort: 443}.Bytes()
	udp, tcp := shield.ProtoUDP, shield.ProtoTCP
	later := sec + 100*time.Millisecond
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		{Name: "a comes in", At: sec, Frame: a, Want: sim.Pass, Delta: One(pass, shield.ReasonOK, udp)},
		{Name: "b comes in", At: sec, Frame: b, Want: sim.Pass, Delta: One(pass, shield.ReasonOK, udp)},
		{Name: "c comes in", At: sec, Frame: c, Want: sim.Pass, Delta: One(pass, shield.ReasonOK, udp)},
		{Name: "a spends its burst", At: sec, Frame: a, Times: 99, Want: sim.Pass, Delta: N(99, pass, shield.ReasonOK, udp)},
		{Name: "a stranger is shed first", At: sec, Frame: stranger, Want: sim.Drop, Delta: One(drop, shield.ReasonAdmission, udp)},
		{Name: "b gets what is left", At: sec, Frame: b, Times: 98, Want: sim.Pass, Delta: N(98, pass, shield.ReasonOK, udp)},
		{Name: "b within its burst, over the aggregate", At: sec, Frame: b, Want: sim.Drop, Delta: One(drop, shield.ReasonLimit, udp)},
		{Name: "c within its burst, over the aggregate", At: sec, Frame: c, Times: 10, Want: sim.Drop, Delta: N(10, drop, shield.ReasonLimit, udp)},
		{Name: "tcp/443 has no aggregate", At: sec, Frame: syn, Times: 5, Want: sim.Pass, Delta: N(5, pass, shield.ReasonOK, tcp)},
		{Name: "100 ms on: the stranger still shed", At: later, Frame: stranger, Want: sim.Drop, Delta: One(drop, shield.ReasonAdmission, udp)},
		{Name: "100 ms on: c served", At: later, Frame: c, Times: 10, Want: sim.Pass, Delta: N(10, pass, shield.ReasonOK, udp)},
	}}.Run(t)
}
