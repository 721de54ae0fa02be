package lb

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descCalls = prometheus.NewDesc("shield_lb_calls_total",
		"connect() and sendmsg() calls to a service, by service and outcome (translated, no_backend), summed over CPUs.",
		[]string{"service", "outcome"}, nil)
	descNotService = prometheus.NewDesc("shield_lb_not_service_calls_total",
		"connect() and sendmsg() calls in the balanced cgroup to no service: untouched.", nil, nil)
	descBackends = prometheus.NewDesc("shield_lb_backends",
		"Backends of a service, by state (active, draining).", []string{"service", "state"}, nil)
	descServices = prometheus.NewDesc("shield_lb_services",
		"Services configured.", nil, nil)
	descReverse = prometheus.NewDesc("shield_lb_reverse_entries",
		"Entries of the reverse-translation LRU.", nil, nil)
	descReverseCap = prometheus.NewDesc("shield_lb_reverse_capacity",
		"Capacity of the reverse-translation LRU.", nil, nil)
)

// Collector returns a Prometheus collector that reads the balancer's maps
// at scrape time (shield_lb_*).
func (l *LB) Collector() prometheus.Collector { return collector{l} }

type collector struct{ l *LB }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCalls, descNotService, descBackends, descServices, descReverse, descReverseCap} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	svcs := c.l.Services()
	if cnt, err := c.l.Counters(); err != nil {
		ch <- prometheus.NewInvalidMetric(descCalls, err)
	} else {
		for _, s := range svcs {
			row := cnt.Services[s.ServiceKey]
			for _, o := range []Outcome{Translated, NoBackend} {
				ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(row[o]), s.ServiceKey.String(), o.String())
			}
		}
		ch <- prometheus.MustNewConstMetric(descNotService, prometheus.CounterValue, float64(cnt.NotService))
	}
	for _, s := range svcs {
		var active, draining int
		for _, b := range s.Backends {
			if b.Draining {
				draining++
			} else {
				active++
			}
		}
		ch <- prometheus.MustNewConstMetric(descBackends, prometheus.GaugeValue, float64(active), s.ServiceKey.String(), "active")
		ch <- prometheus.MustNewConstMetric(descBackends, prometheus.GaugeValue, float64(draining), s.ServiceKey.String(), "draining")
	}
	ch <- prometheus.MustNewConstMetric(descServices, prometheus.GaugeValue, float64(len(svcs)))
	if n, err := c.l.ReverseEntries(); err != nil {
		ch <- prometheus.NewInvalidMetric(descReverse, err)
	} else {
		ch <- prometheus.MustNewConstMetric(descReverse, prometheus.GaugeValue, float64(n))
	}
	ch <- prometheus.MustNewConstMetric(descReverseCap, prometheus.GaugeValue, float64(c.l.ReverseSize()))
}
