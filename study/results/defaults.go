package results

import (
	"fmt"
	"math"
	"time"

	"github.com/xdpshield/xdpshield/e2e"
	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
)

// Defaults are the limits the study derives for its service from what a
// legitimate client sends and what the service answers.
type Defaults struct {
	ClientPPS float64       `json:"client_pps"` // the paced client's packets/s from its address
	Rate      uint64        `json:"rate"`       // per source: twice the paced client, up to the next 250
	Burst     uint64        `json:"burst"`      // per source: two seconds of the rate
	Capacity  float64       `json:"capacity"`   // the datagram service's requests/s
	Budget    time.Duration `json:"budget_ns"`  // the datagram p99 a storm may cost (e2e's budget)
	AggRate   uint64        `json:"aggregate_rate"`
	AggBurst  uint64        `json:"aggregate_burst"`
}

// AggregateShare is the part of the service's capacity the aggregate
// limit lets through: a tenth is kept for the service's own jitter (a
// queue fed at its service rate grows without bound).
const AggregateShare = 0.9

// Derive derives the defaults: the per-source rate twice the paced
// client's packets/s (rounded up to 250), the burst two seconds of it,
// the aggregate of the datagram service 0.9 of its capacity with a burst
// that the service drains within half the datagram budget, so a full
// burst queued at the service costs a legitimate request at most that.
func Derive(clientPPS, capacity float64, budget time.Duration) Defaults {
	d := Defaults{ClientPPS: clientPPS, Capacity: capacity, Budget: budget}
	d.Rate = uint64(math.Ceil(2*clientPPS/250)) * 250
	d.Rate = max(d.Rate, 250)
	d.Burst = 2 * d.Rate
	d.AggRate = uint64(AggregateShare * capacity)
	d.AggBurst = max(uint64(float64(d.AggRate)*budget.Seconds()/2), 1)
	return d
}

// designClientPPS is the paced client's packets/s from its address as
// the published study measured it (docs/study.md, 351): the study's
// limits are derived from it before it measures, and the report derives
// them again from its own run.
const designClientPPS = 351

// datagramBudget is the datagram p99 a storm may cost a legitimate client
// whose quiet p99 is under e2e's floor: e2e.DefaultBudget's limit.
func datagramBudget(baseline time.Duration) time.Duration {
	return e2e.DefaultBudget().Limit(parts.Datagram, baseline)
}

// StudyDefaults are the defaults the study measures with.
func StudyDefaults() Defaults { return Derive(designClientPPS, UDPCapacity, datagramBudget(0)) }

// Apply sets d on l: the per-source rate and burst, and the aggregate
// limit of the datagram service.
func (d Defaults) Apply(l config.Limits) config.Limits {
	l.Rate, l.Burst = d.Rate, d.Burst
	l.Aggregates = []config.Aggregate{{Destination: config.Destination{Proto: counter.ProtoUDP, Port: storm.DatagramPort}, Rate: d.AggRate, Burst: d.AggBurst}}
	return l
}

func (d Defaults) String() string {
	return fmt.Sprintf("per source %d packets/s, burst %d; udp/%d aggregate %d/s, burst %d", d.Rate, d.Burst, storm.DatagramPort, d.AggRate, d.AggBurst)
}

// Limits are the limits of the shield and of its nftables twin in every
// configuration: the service's defaults with the destinations the storm
// floods protected as in the storm demo (TCP 443, UDP 53, ICMP), and the
// per-source rate and burst and the datagram service's aggregate limit
// the study derives for its service (StudyDefaults).
func Limits() config.Limits { return StudyDefaults().Apply(e2e.StormLimits(config.DefaultLimits())) }
