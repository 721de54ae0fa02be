// Package gate is the regression gate for program changes: on every kernel
// of the VM matrix and on the host it collects what a change to bpf/ (or to
// the Go that writes and reads the program's maps) may break, compares it
// with fixtures/gate/baseline.json, and reports.
//
// It owns:
//   - the figures of one kernel (Figures): behaviour (the pass, fail and skip
//     counts of the test packages, shield and shield_compat), verifier
//     complexity (instructions processed and program size, per program) and
//     speed (ns/packet per path as a ratio to an XDP_DROP reference, with
//     sub-nanosecond precision and a measured run-to-run spread);
//   - Collect, which measures complexity and speed in the running kernel (the
//     test binary of this package runs it inside each VM: `-gate.emit`);
//   - Compare and the report (printed and JSON), and the baseline's rules: no
//     baseline from a dirty tree, none from a different set of kernels;
//   - Config.Collect, which gathers the figures on the host and in the VM
//     matrix (the `vmtest gate` command), and Seeds, the bugs `make
//     gate-teeth` proves it catches.
//
// It loads programs through package bpf, package shield and package
// xdplb (and, to time the balancer, a small program of its own), attaches
// nothing and touches no network namespace; it writes only under its output
// directory and, on update, the baseline file.
package gate
