// Package l7 owns the L7 fast path (issue 16): the Go reverse proxy that
// enforces a policy (package l7/policy; the slow path and the baseline),
// and the loader of the socket-layer data plane (bpf/l7.c) that enforces
// the part of it the kernel can handle and passes everything else up to
// that proxy.
//
// It owns the l7 programs and their maps; it never touches the shield's XDP
// program, its maps or the network configuration. Nothing is applied from
// a configuration with an error (policy.Section.Validate).
//
// Listen and Server.Start run an [l7] section (policy.Section), with the
// fast path where the kernel runs it and the proxy alone otherwise;
// Server.Status and Server.Collector report it (GET /v1/l7, shield_l7_*).
// Server.Replace changes the policy of a running server, validated whole,
// each request judged by the old or the new one (swap.go says how the
// kernel's maps change under running parsers).
package l7
