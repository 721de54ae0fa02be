package lb

import (
	"github.com/xdpshield/xdpshield/lb/lbconf"
	"github.com/xdpshield/xdpshield/lb/maglev"
)

// maglevTable fills a table of m slots (m prime) with the ids of backends,
// by Maglev's population (see maglev.Table), each weighted by its weight.
func maglevTable(backends []backend, m int) []uint32 {
	names := make([]string, len(backends))
	weights := make([]uint32, len(backends))
	for i, b := range backends {
		names[i], weights[i] = b.addr.String(), uint32(lbconf.WeightOf(b.weight))
	}
	out := make([]uint32, m)
	for c, i := range maglev.Table(names, weights, m) {
		out[c] = backends[i].id
	}
	return out
}

// weightedTable fills random mode's table of m slots: each backend gets a
// share of slots proportional to its weight, interleaved (smooth weighted
// round robin) so that any stretch of the table holds the same proportions. The program indexes
// it uniformly (prandom, or a hash of the socket cookie).
func weightedTable(backends []backend, m int) []uint32 {
	var sum int
	for _, b := range backends {
		sum += int(lbconf.WeightOf(b.weight))
	}
	// Smooth weighted round robin (nginx's): every step each backend
	// earns its weight, the richest is chosen and pays the sum. Over sum
	// steps each backend is chosen exactly weight times; over m steps,
	// within one of m*w/sum.
	cur := make([]int, len(backends))
	out := make([]uint32, m)
	for s := range out {
		best := 0
		for i, b := range backends {
			cur[i] += int(lbconf.WeightOf(b.weight))
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= sum
		out[s] = backends[best].id
	}
	return out
}
