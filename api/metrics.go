package api

import (
	"cmp"
	"context"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// BuildInfo labels shield_build_info.
type BuildInfo struct {
	Version  string
	Revision string
}

// scrapeTimeout bounds the table walk a scrape does to count sources.
const scrapeTimeout = 5 * time.Second

var (
	descPackets = prometheus.NewDesc("shield_packets_total",
		"Packets seen by the XDP program, by verdict, reason and protocol (summed over CPUs).",
		[]string{"verdict", "reason", "proto"}, nil)
	descBytes = prometheus.NewDesc("shield_bytes_total",
		"Bytes of the packets shield_packets_total counts (whole frames from the Ethernet header), by verdict, reason and protocol (summed over CPUs).",
		[]string{"verdict", "reason", "proto"}, nil)
	descTracked = prometheus.NewDesc("shield_sources_tracked",
		"Sources in the per-source table.", nil, nil)
	descCapacity = prometheus.NewDesc("shield_sources_capacity",
		"Capacity of the per-source table.", nil, nil)
	descEvictions = prometheus.NewDesc("shield_sources_evictions_total",
		"Insertions into the per-source table that replaced an idle source rather than taking an empty way (summed over CPUs).", nil, nil)
	descRate = prometheus.NewDesc("shield_limit_rate_packets_per_second",
		"Configured refill rate of a bucket: per source, or for admitting new sources; of protected traffic (source, admission) or of return traffic (unprotected, unprotected_admission).", []string{"bucket"}, nil)
	descBurst = prometheus.NewDesc("shield_limit_burst_packets",
		"Configured burst of a bucket: per source, or for admitting new sources; of protected traffic (source, admission) or of return traffic (unprotected, unprotected_admission).", []string{"bucket"}, nil)
	descProtected = prometheus.NewDesc("shield_protected_destinations",
		"Destinations held to the client limits (0: every destination is).", nil, nil)
	descOwn = prometheus.NewDesc("shield_own_addresses",
		"The machine's own addresses: a frame from the wire claiming one as its source is dropped as spoofed.", []string{"family"}, nil)
	descKeyPrefix = prometheus.NewDesc("shield_key_prefix_length",
		"Prefix length a source is keyed by: its addresses share one bucket.", []string{"family"}, nil)
	descDryRun = prometheus.NewDesc("shield_dry_run",
		"1 when the shield counts would-be drops and passes them.", nil, nil)
	descList = prometheus.NewDesc("shield_list_prefixes",
		"Prefixes on the allow and deny lists.", []string{"list", "family"}, nil)
	descListHits = prometheus.NewDesc("shield_list_hits_total",
		"Packets whose longest listed match was this prefix, per list; only prefixes with hits, at most maxHitSeries per list, the most hit first.",
		[]string{"list", "prefix"}, nil)
	descBuild = prometheus.NewDesc("shield_build_info",
		"Build of the running shield service; the value is always 1.",
		[]string{"version", "revision", "goversion"}, nil)
)

// maxHitSeries bounds shield_list_hits_total's series per list: a list may
// hold 131,072 prefixes, more series than a scrape should carry.
const maxHitSeries = 1000

// collectHits sends the hit counts of list l's most hit prefixes.
func collectHits(ch chan<- prometheus.Metric, sh *shield.Shield, l lists.List) {
	hits, err := sh.ListHits(l)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descListHits, err)
		return
	}
	type hit struct {
		p string
		n uint64
	}
	var hs []hit
	for p, n := range hits {
		if n > 0 {
			hs = append(hs, hit{p.String(), n})
		}
	}
	slices.SortFunc(hs, func(a, b hit) int {
		if a.n != b.n {
			return cmp.Compare(b.n, a.n)
		}
		return strings.Compare(a.p, b.p)
	})
	for _, h := range hs[:min(len(hs), maxHitSeries)] {
		ch <- prometheus.MustNewConstMetric(descListHits, prometheus.CounterValue, float64(h.n), l.String(), h.p)
	}
}

// collector reads the program's maps at scrape time.
type collector struct {
	s     *Server
	build BuildInfo
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descBytes, descTracked, descCapacity, descEvictions, descRate, descBurst, descProtected, descKeyPrefix, descOwn, descDryRun, descList, descListHits, descBuild} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	sh := c.s.sh
	if cnt, err := sh.Counters(); err != nil {
		ch <- prometheus.NewInvalidMetric(descPackets, err)
	} else {
		for _, v := range counter.Verdicts() {
			for _, r := range counter.Reasons() {
				for _, p := range counter.Protos() {
					ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue,
						float64(cnt[v][r][p]), v.String(), r.String(), p.String())
				}
			}
		}
	}
	if cnt, err := sh.Bytes(); err != nil {
		ch <- prometheus.NewInvalidMetric(descBytes, err)
	} else {
		for _, v := range counter.Verdicts() {
			for _, r := range counter.Reasons() {
				for _, p := range counter.Protos() {
					ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue,
						float64(cnt[v][r][p]), v.String(), r.String(), p.String())
				}
			}
		}
	}
	collectHits(ch, sh, lists.AllowList)
	collectHits(ch, sh, lists.DenyList)
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if n, err := c.s.sourceCount(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(descTracked, err)
	} else {
		ch <- prometheus.MustNewConstMetric(descTracked, prometheus.GaugeValue, float64(n))
	}
	ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(sh.TableSize()))
	if n, err := sh.Evictions(); err != nil {
		ch <- prometheus.NewInvalidMetric(descEvictions, err)
	} else {
		ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(n))
	}

	l := sh.Limits()
	ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, float64(l.Rate), "source")
	ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, float64(l.AdmissionRate), "admission")
	ch <- prometheus.MustNewConstMetric(descBurst, prometheus.GaugeValue, float64(l.Burst), "source")
	ch <- prometheus.MustNewConstMetric(descBurst, prometheus.GaugeValue, float64(l.AdmissionBurst), "admission")
	ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, float64(l.Unprotected.Rate), "unprotected")
	ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, float64(l.Unprotected.AdmissionRate), "unprotected_admission")
	ch <- prometheus.MustNewConstMetric(descBurst, prometheus.GaugeValue, float64(l.Unprotected.Burst), "unprotected")
	ch <- prometheus.MustNewConstMetric(descBurst, prometheus.GaugeValue, float64(l.Unprotected.AdmissionBurst), "unprotected_admission")
	ch <- prometheus.MustNewConstMetric(descProtected, prometheus.GaugeValue, float64(len(l.Protected)))
	ch <- prometheus.MustNewConstMetric(descKeyPrefix, prometheus.GaugeValue, float64(l.KeyPrefix4), "ipv4")
	ch <- prometheus.MustNewConstMetric(descKeyPrefix, prometheus.GaugeValue, float64(l.KeyPrefix6), "ipv6")
	if own, err := sh.Own(); err == nil {
		n4 := 0
		for _, a := range own {
			if a.Is4() {
				n4++
			}
		}
		ch <- prometheus.MustNewConstMetric(descOwn, prometheus.GaugeValue, float64(n4), "ipv4")
		ch <- prometheus.MustNewConstMetric(descOwn, prometheus.GaugeValue, float64(len(own)-n4), "ipv6")
	}
	dry := 0.0
	if l.DryRun {
		dry = 1
	}
	ch <- prometheus.MustNewConstMetric(descDryRun, prometheus.GaugeValue, dry)

	for _, list := range []lists.List{lists.AllowList, lists.DenyList} {
		ps, err := sh.List(list)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descList, err)
			continue
		}
		n4, n6 := 0, 0
		for _, p := range ps {
			if p.Addr().Is4() {
				n4++
			} else {
				n6++
			}
		}
		ch <- prometheus.MustNewConstMetric(descList, prometheus.GaugeValue, float64(n4), list.String(), "ipv4")
		ch <- prometheus.MustNewConstMetric(descList, prometheus.GaugeValue, float64(n6), list.String(), "ipv6")
	}
	ch <- prometheus.MustNewConstMetric(descBuild, prometheus.GaugeValue, 1,
		c.build.Version, c.build.Revision, runtime.Version())
}

func newRegistry(s *Server, opts Options) (*prometheus.Registry, *prometheus.CounterVec) {
	reg := prometheus.NewRegistry()
	build := opts.Build
	if build.Version == "" {
		build.Version = "dev"
	}
	if build.Revision == "" {
		build.Revision = "unknown"
	}
	// The XDP program's metrics name the interface they describe (one
	// service protects one): iface="eth0". The API's, the balancer's
	// and the L7 proxy's are not an interface's.
	xdp := prometheus.Registerer(reg)
	if opts.Info.Iface != "" {
		xdp = prometheus.WrapRegistererWith(prometheus.Labels{"iface": opts.Info.Iface}, reg)
	}
	xdp.MustRegister(collector{s: s, build: build})
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shield_api_requests_total",
		Help: "API requests answered, by HTTP status code.",
	}, []string{"code"})
	reg.MustRegister(reqs)
	xdp.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shield_attached",
		Help: "1 while the program protects the interface, 0 while it cannot (interface gone, program detached).",
	}, func() float64 {
		if ok, _ := s.health(); ok {
			return 1
		}
		return 0
	}))
	if !opts.NoProcessMetrics {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return reg, reqs
}
