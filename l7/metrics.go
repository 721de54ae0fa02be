package l7

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpshield/xdpshield/l7/policy"
)

var (
	descRequests = prometheus.NewDesc("shield_l7_requests_total",
		"Requests sent to a route's backends, by route and path: fast (redirected by the kernel) or slow (forwarded by the Go proxy).",
		[]string{"route", "path"}, nil)
	descResponses = prometheus.NewDesc("shield_l7_responses_total",
		"Responses of a route's backends the Go proxy forwarded, by route and status class (1xx..5xx; 5xx includes its own 502s). The kernel does not parse responses: fast requests are not in it.",
		[]string{"route", "code"}, nil)
	descDenied = prometheus.NewDesc("shield_l7_denied_total",
		"Requests answered 403 by an RBAC rule, by rule; none of them reached a backend.",
		[]string{"rule"}, nil)
	descNoRoute = prometheus.NewDesc("shield_l7_no_route_total",
		"Requests answered 404: no route matched.", nil, nil)
	descReasons = prometheus.NewDesc("shield_l7_fast_path_messages_total",
		"Messages the kernel's fast path judged, by outcome: fast (redirected), response (a response to a redirected request relayed back), crlf (CR/LF after a redirected POST, dropped), and each reason a request went to the proxy (miss, deny, noroute, busy, unparsed, policy, sticky, sticky_more, redirect_gone, unknown).",
		[]string{"reason"}, nil)
	descFast = prometheus.NewDesc("shield_l7_fast_path",
		"1 when the kernel's fast path is attached and holds the policy, 0 when the Go proxy alone serves.", nil, nil)
	descGeneration = prometheus.NewDesc("shield_l7_policy_generation",
		"Generation of the L7 policy in force: 1 as the service started, one more each change applied (PUT /v1/l7/policy).", nil, nil)
	descChanges = prometheus.NewDesc("shield_l7_policy_changes_total",
		"L7 policy changes, by result: applied, or refused (invalid: nothing changed).", []string{"result"}, nil)
	descDropped = prometheus.NewDesc("shield_l7_pooled_sockets_dropped_total",
		"Pooled upstream sockets taken out of the fast path's pool because a policy change dropped their backend.", nil, nil)
	descUnjoined = prometheus.NewDesc("shield_l7_fast_path_unjoined_total",
		"Client connections the kernel's fast path could not take (its connection table full, or no memory): the Go proxy alone served them.", nil, nil)
)

// Collector returns a Prometheus collector reading the proxy's counters and
// the fast path's per-CPU map at scrape time (shield_l7_*).
func (s *Server) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descResponses, descDenied, descNoRoute, descReasons, descFast, descGeneration, descChanges, descDropped, descUnjoined} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.s.Status()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descReasons, err)
		return
	}
	for _, r := range st.Routes {
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(r.Fast), r.Name, "fast")
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(r.Slow), r.Name, "slow")
		for k := 1; k < len(r.Class); k++ {
			ch <- prometheus.MustNewConstMetric(descResponses, prometheus.CounterValue, float64(r.Class[k]), r.Name, fmt.Sprintf("%dxx", k))
		}
	}
	for i, r := range st.Rules {
		ch <- prometheus.MustNewConstMetric(descDenied, prometheus.CounterValue, float64(r.Denied), policy.RuleName(r.Rule, i))
	}
	ch <- prometheus.MustNewConstMetric(descNoRoute, prometheus.CounterValue, float64(st.NoRoute))
	for r := Reason(0); r < numReasons; r++ {
		if st.Reasons != nil {
			ch <- prometheus.MustNewConstMetric(descReasons, prometheus.CounterValue, float64(st.Reasons[r.String()]), r.String())
		}
	}
	on := 0.0
	if st.Fast && st.KernelPolicy {
		on = 1
	}
	ch <- prometheus.MustNewConstMetric(descFast, prometheus.GaugeValue, on)
	ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(st.Generation))
	ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(st.Generation-1), "applied")
	ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(st.Refused), "refused")
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Dropped))
	ch <- prometheus.MustNewConstMetric(descUnjoined, prometheus.CounterValue, float64(st.Unjoined))
}
