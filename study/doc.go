// Package study is the honest half of xdpshield: it measures, side by side
// in one run and repeated, what the hook costs legitimate traffic and where
// it pays, against nftables (the twin of nft) and against nothing.
//
// In throwaway namespaces (e2e/storm's topology and generators, e2e/parts'
// client and edge server, reused, not copied; the edge server runs in a
// process of its own, study/proc, so its CPU time can be read from /proc)
// it measures:
//
//   - legitimate throughput (fixed rate and saturation), p50/p99/p99.9 and
//     the edge's CPU time per request, with no program, the shield passing
//     everything (dry-run; allow-all), the shield limiting, the nftables
//     twin, and with a few-source storm against the shield, nftables and
//     nothing;
//   - drop capacity: the live-frames generator at full speed, few and many
//     forged sources, against an XDP_DROP-everything floor, the shield and
//     nftables (frames/s at the edge, drops per softirq CPU-second);
//   - the simulator's ns/packet table (go test -bench ./shield/datapath);
//   - the tc probe's own cost, alone, beside the shield and under storm, and
//     its histogram against the client's own timings;
//   - (section peers) the L7 fast path beside the Go proxy, HAProxy and
//     nginx enforcing one policy (study/peers writes the peers' configs):
//     latency, requests/s and CPU per request, closed loop and fixed rate,
//     keep-alive and new connections, small and 64 KiB responses;
//   - (section lists) large deny lists (1k, 64k, 1M host prefixes, IPv4
//     and IPv6): drop capacity and load time of the shield and of
//     xdp-tools' xdp-filter on the storm link, beside the XDP_DROP floor.
//     xdp-filter runs in the edge namespace only (nsenter --net), on
//     edge0, and is unloaded after each cell; its pins under
//     /sys/fs/bpf/xdp-filter are global, so the section leaves a machine
//     where they exist alone.
//
// Options.Only (shieldlab study -only) runs some sections alone.
//
// It writes report.md, results.json and PNG plots (drawn by gnuplot) to an
// output directory. Its parts are packages of their own: study/results
// (the figures, their statistics and targets), study/report (report.md,
// the plots), study/proc (the edge server's process and the CPU readings)
// and study/peers (the L7 peers' configurations). It must not touch anything outside the namespaces it
// creates (the e2e rules: addresses from 198.18.0.0/15 and 2001:db8::/32,
// bounded generators, everything removed at the end); its figures are
// medians over runs with their spread, never asserted here.
package study
