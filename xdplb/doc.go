// Package xdplb is the XDP layer-4 balancer's control side: it loads
// bpf/xdplb.c, validates a configuration (VIPs, backends, weights, drain)
// whole before writing any map, fills each VIP's Maglev table (lb/maglev's
// builder) and swaps it in with one map update, and reads the per-CPU
// counters per reason, VIP and backend.
//
// The program balances north-south traffic at the driver: a packet to a
// VIP is encapsulated (IPIP, IP6IP6) to a backend and sent back out of
// the interface it came in by, to the configured next hop; the backend
// decapsulates and answers the client itself (direct server return).
// Behind the shield, the shield's `next` program array holds this
// program (Balancer.Chain), so the shield judges first.
//
// This package owns the xdplb maps; it attaches nothing to an interface
// itself beyond Attach, and it never touches the shield's other maps.
package xdplb
