package lb

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descCalls = prometheus.NewDesc("shield_lb_calls_total",
		"connect() and sendmsg() calls to a service, by service and outcome (translated, no_backend, denied: outside the source ranges), summed over CPUs.",
		[]string{"service", "outcome"}, nil)
	descNotService = prometheus.NewDesc("shield_lb_not_service_calls_total",
		"connect() and sendmsg() calls in the balanced cgroup to no service: untouched.", nil, nil)
	descBackends = prometheus.NewDesc("shield_lb_backends",
		"Backends of a service, by state (active, draining, quarantined: failing its health checks).", []string{"service", "state"}, nil)
	descProbes = prometheus.NewDesc("shield_lb_backend_probes_total",
		"Health probes of a backend, by result (ok, failed); services with a health check only.", []string{"service", "backend", "result"}, nil)
	descServices = prometheus.NewDesc("shield_lb_services",
		"Services configured.", nil, nil)
	descReverse = prometheus.NewDesc("shield_lb_reverse_entries",
		"Sockets holding balancer state (translations to report back), from counters: created less released.", nil, nil)
	descReverseCap = prometheus.NewDesc("shield_lb_reverse_capacity",
		"Capacity of the fallback's per-socket state LRU (state mode lru); 0 when state lives on the sockets (sk_storage).", nil, nil)
	descStateEvents = prometheus.NewDesc("shield_lb_state_events_total",
		"Per-socket state events: created, released, evicted (a socket used more services than its state holds), missed (state could not be stored).",
		[]string{"event"}, nil)
	descRemoved = prometheus.NewDesc("shield_lb_removed_backend_sockets_total",
		"Balanced sockets found on backends as they were removed, by outcome: destroyed (bpf_sock_destroy, 6.5+), left_open (the fallback).",
		[]string{"outcome"}, nil)
	descDestroyMode = prometheus.NewDesc("shield_lb_destroy_mode",
		"What removing a backend does to its sockets (1 for the mode in use): sock_destroy, or left_open.", []string{"mode"}, nil)
	descStateMode = prometheus.NewDesc("shield_lb_state_mode",
		"Where per-socket state lives (1 for the mode in use): sk_storage, or the lru fallback.", []string{"mode"}, nil)
)

// Collector returns a Prometheus collector that reads the balancer's maps
// at scrape time (shield_lb_*).
func (l *LB) Collector() prometheus.Collector { return collector{l} }

type collector struct{ l *LB }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCalls, descNotService, descBackends, descServices, descProbes, descReverse, descReverseCap, descStateEvents, descStateMode, descRemoved, descDestroyMode} {
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
			for _, o := range []Outcome{Translated, NoBackend, Denied} {
				ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(row[o]), s.ServiceKey.String(), o.String())
			}
		}
		ch <- prometheus.MustNewConstMetric(descNotService, prometheus.CounterValue, float64(cnt.NotService))
	}
	for _, s := range svcs {
		var active, draining, quarantined int
		for _, b := range s.Backends {
			switch {
			case b.Draining:
				draining++
			case b.Quarantined:
				quarantined++
			default:
				active++
			}
		}
		ch <- prometheus.MustNewConstMetric(descBackends, prometheus.GaugeValue, float64(quarantined), s.ServiceKey.String(), "quarantined")
		if s.Health != nil {
			for a, p := range c.l.Probes(s.ServiceKey) {
				ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(p.OK), s.ServiceKey.String(), a.String(), "ok")
				ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(p.Failed), s.ServiceKey.String(), a.String(), "failed")
			}
		}
		ch <- prometheus.MustNewConstMetric(descBackends, prometheus.GaugeValue, float64(active), s.ServiceKey.String(), "active")
		ch <- prometheus.MustNewConstMetric(descBackends, prometheus.GaugeValue, float64(draining), s.ServiceKey.String(), "draining")
	}
	ch <- prometheus.MustNewConstMetric(descServices, prometheus.GaugeValue, float64(len(svcs)))
	if st, err := c.l.StateCounters(); err != nil {
		ch <- prometheus.NewInvalidMetric(descReverse, err)
	} else {
		ch <- prometheus.MustNewConstMetric(descReverse, prometheus.GaugeValue, float64(st.Live(c.l.StateMode(), c.l.ReverseSize())))
		for _, ev := range []struct {
			name string
			v    uint64
		}{{"created", st.Created}, {"released", st.Released}, {"evicted", st.Evicted}, {"missed", st.Missed}} {
			ch <- prometheus.MustNewConstMetric(descStateEvents, prometheus.CounterValue, float64(ev.v), ev.name)
		}
	}
	ch <- prometheus.MustNewConstMetric(descStateMode, prometheus.GaugeValue, 1, string(c.l.StateMode()))
	rs := c.l.RemovedSockets()
	ch <- prometheus.MustNewConstMetric(descRemoved, prometheus.CounterValue, float64(rs.Destroyed), "destroyed")
	ch <- prometheus.MustNewConstMetric(descRemoved, prometheus.CounterValue, float64(rs.LeftOpen), "left_open")
	dm, _ := c.l.DestroyMode()
	ch <- prometheus.MustNewConstMetric(descDestroyMode, prometheus.GaugeValue, 1, string(dm))
	ch <- prometheus.MustNewConstMetric(descReverseCap, prometheus.GaugeValue, float64(c.l.ReverseSize()))
}
