// Package maglev builds Maglev lookup tables (Eisenbud et al., NSDI 2016),
// weighted as Cilium's: a table of m slots (m prime) holding indexes into a
// list of backends, each backend's share proportional to its weight, and
// removing one backend moving mostly the slots it held. The socket
// balancer (lb) and the XDP balancer (xdplb) fill their tables with it.
//
// It is pure computation: it owns no map, loads and writes nothing; the
// callers put the table where their programs read it.
package maglev
