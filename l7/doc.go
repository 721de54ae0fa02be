// Package l7 owns the L7 fast path (issue 16): one policy configuration
// (routes by Host and path prefix to backend pools with a consistent hash of a
// chosen header, RBAC allow/deny, one header mutation), the Go reverse proxy
// that enforces it (the slow path and the baseline), and the loader of the
// socket-layer data plane (bpf/l7.c) that enforces the part of it the kernel
// can handle and passes everything else up to that proxy.
//
// It owns the l7 programs and their maps; it never touches the shield's XDP
// program, its maps or the network configuration. Config.Validate checks a
// configuration whole: nothing is applied from a configuration with an error.
//
// Section is the [l7] section of `shield serve`'s configuration; Listen and
// Server.Start run it, with the fast path where the kernel runs it and the
// proxy alone otherwise; Server.Status and Server.Collector report it (GET
// /v1/l7, shield_l7_*). Server.Replace changes the policy of a running
// server, validated whole, each request judged by the old or the new one
// (swap.go says how the kernel's maps change under running parsers).
package l7
