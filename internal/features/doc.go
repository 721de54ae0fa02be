// Package features probes the kernel features that only the lab needs: the
// tests, benchmarks, generators and the gate (a map-element iterator, the
// for-each helper in a syscall program, XDP live frames). Kernel builds of
// the same release differ: one 6.18 build refuses iterator programs with
// EPERM, as root. So such a feature is probed, once per process, by doing
// what the lab does with it, and a test that needs a missing one skips
// naming the feature and the errno (internal/testutil.Feature). The gate
// records, per kernel, which features were present, so a feature that
// disappears from a pinned kernel fails it there (vmtest/gate).
//
// What the product itself needs (XDP, BPF_PROG_TEST_RUN, the shield's maps,
// cgroup and sockmap programs) is not probed here: its absence is a failure,
// as it would be in production.
//
// SHIELD_FEATURES_OFF (a comma-separated list of names, or "all") makes
// probes fail as the refusing kernel does, with EPERM, so that the skip path
// is exercised on a kernel that has the feature.
//
// It loads programs through package bpf and closes them; it attaches
// nothing that outlives a probe and touches no network namespace but its
// own loopback (a live-frames test run of one dropped frame).
package features
