package report

import (
	"fmt"
	"io"

	"github.com/xdpshield/xdpshield/study/results"
)

// lbName names an xdplb target in the report.
func lbName(t string) string {
	switch t {
	case "drop":
		return "XDP_DROP (floor)"
	case "tx":
		return "XDP_TX, frame unmodified (floor)"
	}
	if t == "xdplb-16" {
		return "xdplb, 16 flows (connection-table hits)"
	}
	return "xdplb, 65,536 flows (table thrashes: misses, inserts)"
}

// ReportLB writes the xdplb section.
func ReportLB(w io.Writer, r *results.Results) {
	l := r.LB
	fmt.Fprintln(w, "\n## The XDP layer-4 balancer: packets per second beside the floors")
	if l == nil {
		fmt.Fprintln(w, "\nNot measured.")
		return
	}
	fmt.Fprintf(w, "\nThe storm link of the main section (same veth, same generator: %s): UDP frames at full speed to the edge's datagram port (the VIP: %s and %s, port %d, %d backends) from 65,536 sources (198.19.0.0 upward; 2001:db8:1::1 upward; 16 for the last row), one family at a time, against the XDP_DROP floor, the XDP_TX floor (the frame sent back out unmodified) and xdplb (VIP match, per-CPU LRU connection table, Maglev table, IPIP/IP6IP6 encapsulation, XDP_TX towards storm0, which drops what comes back). 65,536 flows are more than a CPU's share of the balancer's 65,536-entry connection table (an LRU list per CPU): nearly every frame misses, takes a Maglev choice and an insert that evicts, the worst case; 16 flows are all hits. Handled: dropped, sent back or balanced (xdplb's own tx counter). Generator: what it sent a second (the edge's link refusals included); it shares the machine's cores with the edge, so it sends less when the target costs more. Medians over runs (min–max). \"generator-bound\": the target handled at least 90%% of the generator's own rate (what it sends into the XDP_DROP floor), so the figure is the generator's, not the target's ceiling; the floor always is.\n",
		r.Generator, "198.18.0.1", "2001:db8::1", 53, results.LBBackends)
	fmt.Fprintln(w, "\n| family | target | generator Mpps | handled Mpps | handled per softirq CPU-s | bound |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|")
	for _, fam := range results.ListFamilies {
		for _, t := range results.LBTargets {
			c := l.Cell(t, fam)
			if c == nil {
				continue
			}
			bound := "target"
			if c.GeneratorBound(l.Cell("drop", fam)) {
				bound = "generator-bound"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", fam, lbName(t), mppsSpread(c.GenPPS), mppsSpread(c.DonePPS), humanOr(c.PerCPU.Median), bound)
		}
	}
	if len(l.Moved) > 0 {
		fmt.Fprintln(w, "\nNew flows that change backend when the last of n backends goes (the balancer's 4,093-slot Maglev table, computed; a hash modulo n as a plain hash-mod design does; nftables' `jhash ... mod n` DNAT map is no modulo: nft_jhash scales the hash into n ranges, reciprocal_scale). Established flows keep theirs through state (xdplb's connection table, conntrack) unless they were on the removed backend.")
		fmt.Fprintln(w, "\n| backends n | Maglev (xdplb) | ideal 1/n | nftables jhash mod n | hash modulo n |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|")
		for _, m := range l.Moved {
			fmt.Fprintf(w, "| %d | %.3f | %.3f | %.3f | %.3f |\n", m.N, m.Maglev, 1/float64(m.N), m.NFT, m.Modulo)
		}
	}
	for _, s := range l.Skipped {
		fmt.Fprintf(w, "\nNot measured: %s.\n", s)
	}
}
