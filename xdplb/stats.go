package xdplb

import (
	"fmt"
	"net/netip"

	"github.com/xdpshield/xdpshield/bpf"
)

// Reasons names the program's counters (enum lb_reason), by index.
var Reasons = [bpf.XdplbLbReasonLB_REASON_MAX]string{
	bpf.XdplbLbReasonLB_NOT_IP:      "not_ip",
	bpf.XdplbLbReasonLB_MALFORMED:   "malformed",
	bpf.XdplbLbReasonLB_FRAGMENT:    "fragment",
	bpf.XdplbLbReasonLB_NOT_VIP:     "not_vip",
	bpf.XdplbLbReasonLB_TX:          "tx",
	bpf.XdplbLbReasonLB_TOO_BIG:     "too_big",
	bpf.XdplbLbReasonLB_NO_BACKEND:  "no_backend",
	bpf.XdplbLbReasonLB_ICMP_TX:     "icmp_tx",
	bpf.XdplbLbReasonLB_CONN_HIT:    "conn_hit",
	bpf.XdplbLbReasonLB_ADJUST_FAIL: "adjust_fail",
	bpf.XdplbLbReasonLB_VIP_SOURCE:  "vip_source",
}

// Count is packets and bytes (of the inner IP packets) summed over CPUs.
type Count struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Stats is what the program counted since it was loaded.
type Stats struct {
	Reasons  map[string]uint64    `json:"reasons"`
	VIPs     map[string]Count     `json:"vips"`
	Backends map[netip.Addr]Count `json:"backends"`
}

// Stats reads the per-CPU counters for the configured VIPs and backends.
func (b *Balancer) Stats() (Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Stats{Reasons: map[string]uint64{}, VIPs: map[string]Count{}, Backends: map[netip.Addr]Count{}}
	for i, name := range Reasons {
		var per []uint64
		if err := b.objs.Stats.Lookup(uint32(i), &per); err != nil {
			return Stats{}, fmt.Errorf("read xdplb stats: %w", err)
		}
		for _, v := range per {
			s.Reasons[name] += v
		}
	}
	sum := func(per []bpf.XdplbLbCount) Count {
		var c Count
		for _, v := range per {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
		}
		return c
	}
	for name, v := range b.vips {
		var per []bpf.XdplbLbCount
		if err := b.objs.VipStats.Lookup(v.id, &per); err != nil {
			return Stats{}, fmt.Errorf("read stats of %s: %w", name, err)
		}
		s.VIPs[name] = sum(per)
	}
	// A backend of several VIPs holds one id per VIP: its counts add up.
	for m, id := range b.ids {
		var per []bpf.XdplbLbCount
		if err := b.objs.BackendStats.Lookup(id, &per); err != nil {
			return Stats{}, fmt.Errorf("read stats of %s: %w", m.addr, err)
		}
		c, n := s.Backends[m.addr], sum(per)
		c.Packets += n.Packets
		c.Bytes += n.Bytes
		s.Backends[m.addr] = c
	}
	return s, nil
}
