// Package probe loads bpf/probe.c, the second probe: a traffic-control
// program pair that times requests per flow on one interface (request in on
// ingress, answer out on egress, per 5-tuple) into log2 histograms, and
// reads them back: every flow together, and each flow on its own.
//
// It attaches with TCX on kernels that have it (6.6+) and with a clsact
// qdisc and two direct-action cls_bpf filters before; Attach probes and
// chooses, and Close removes only what it added (a clsact qdisc it did not
// create is left in place). It owns the probe's maps and never sits on the
// packet path itself; it does not touch the shield's program or maps.
package probe
