package xdplb

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descReason = prometheus.NewDesc("shield_xdplb_packets_total",
		"Packets the XDP balancer saw, by outcome (tx: balanced; too_big, not_vip, ...: passed; no_backend: dropped).",
		[]string{"reason"}, nil)
	descVIPPackets = prometheus.NewDesc("shield_xdplb_vip_packets_total",
		"Packets balanced to a VIP (ADDR:PORT/PROTO).", []string{"vip"}, nil)
	descVIPBytes = prometheus.NewDesc("shield_xdplb_vip_bytes_total",
		"Bytes of the inner IP packets balanced to a VIP.", []string{"vip"}, nil)
	descBackendPackets = prometheus.NewDesc("shield_xdplb_backend_packets_total",
		"Packets sent to a backend.", []string{"backend"}, nil)
	descBackendBytes = prometheus.NewDesc("shield_xdplb_backend_bytes_total",
		"Bytes of the inner IP packets sent to a backend.", []string{"backend"}, nil)
)

type collector struct{ b *Balancer }

// Collector reads the per-CPU counters at scrape time; VIP and backend
// labels come from the configuration (at most MaxVIPs and MaxBackends).
func (b *Balancer) Collector() prometheus.Collector { return collector{b} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReason, descVIPPackets, descVIPBytes, descBackendPackets, descBackendBytes} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.b.Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descReason, err)
		return
	}
	for r, n := range s.Reasons {
		ch <- prometheus.MustNewConstMetric(descReason, prometheus.CounterValue, float64(n), r)
	}
	for v, n := range s.VIPs {
		ch <- prometheus.MustNewConstMetric(descVIPPackets, prometheus.CounterValue, float64(n.Packets), v)
		ch <- prometheus.MustNewConstMetric(descVIPBytes, prometheus.CounterValue, float64(n.Bytes), v)
	}
	for a, n := range s.Backends {
		ch <- prometheus.MustNewConstMetric(descBackendPackets, prometheus.CounterValue, float64(n.Packets), a.String())
		ch <- prometheus.MustNewConstMetric(descBackendBytes, prometheus.CounterValue, float64(n.Bytes), a.String())
	}
}
