package report

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/xdpshield/xdpshield/study/results"
)

func bodyName(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// l7Rows are the measured (load, conn, body) combinations, in plan order.
func l7Rows(r *results.L7Results) [][3]string {
	var out [][3]string
	seen := map[string]bool{}
	for _, c := range r.Cells {
		k := fmt.Sprint(c.Load, c.Conn, c.Body)
		if !seen[k] {
			seen[k] = true
			out = append(out, [3]string{c.Load, c.Conn, fmt.Sprint(c.Body)})
		}
	}
	return out
}

// ReportL7 writes the L7 comparison's section.
func ReportL7(w io.Writer, r *results.Results) {
	l := r.L7
	fmt.Fprintln(w, "\n## L7: the fast path beside HAProxy and nginx")
	if l == nil {
		fmt.Fprintln(w, "\nNot measured.")
		return
	}
	fmt.Fprintf(w, "\nOne namespace, loopback: a Go backend (in the study's process) answering GET /item?size=N with N bytes; in front of it, each in a process of its own, the Go proxy with its kernel fast path (fast path: %s), the Go proxy alone, HAProxy and nginx, all four enforcing the same policy, generated from one `[l7]` configuration (study/peers: routes by Host and by path prefix, an RBAC deny rule, a hash header; no set_header, which the kernel does not implement: with it every request is passed up to the Go proxy). *direct* is the client to the backend with nothing between.\n", l.FastPath)
	fmt.Fprintf(w, "\nPeers: %s; %s (single process/worker each: `nbthread 1`, `worker_processes 1`; the Go proxy uses every core).\n", l.Versions["haproxy"], l.Versions["nginx"])
	fmt.Fprintf(w, "\nLoad: %d connections from goroutines of the study (the client shares the machine with the proxy); *closed*: each connection sends its next request when the last is answered; *fixed*: %.0f requests/s in all, latency counted from when each request was due (a late client does not hide a slow proxy). *keep-alive*: one connection for every request; *new*: a connection a request. Phases of %.1f s, targets in turn within a round, the order rotated each round. CPU per request: the proxy's processes (user + system) plus every CPU's softirq time, over answered requests; *busy* is every CPU's non-idle time per request: it includes the client, the backend and the neighbours, and is the only column that sees the fast path's kernel work done in the client's and backend's send calls (sk_msg runs in the sender's context, not in softirq). p99.9 only where a run had 10,000 requests or more. Latency in ms; medians over runs, (min–max).\n", l.Conns, l.Rate, l.Seconds)
	for _, row := range l7Rows(l) {
		var body int
		fmt.Sscan(row[2], &body)
		fmt.Fprintf(w, "\n### %s, %s, %s responses\n\n", row[0], row[1], bodyName(body))
		fmt.Fprintln(w, "| target | req/s | p50 | p99 | p99.9 | proxy+softirq µs/req | busy µs/req | errors |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, t := range results.L7Targets {
			c := l.Cell(t, row[0], row[1], body)
			if c == nil {
				continue
			}
			p999 := "-"
			if c.P999.N > 0 {
				p999 = results.Spread(c.P999, "%.3f")
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.0f |\n", t, results.Spread(c.RPS, "%.0f"), results.Spread(c.P50, "%.3f"),
				results.Spread(c.P99, "%.3f"), p999, results.Spread(c.CPUReq, "%.1f"), results.Spread(c.BusyReq, "%.1f"), c.Errors.Median)
		}
	}
	for _, s := range l.Skipped {
		fmt.Fprintf(w, "\nNot measured: %s.\n", s)
	}
	fmt.Fprintln(w, "\nThe generated configurations are in results.json (l7_peers.haproxy_config, nginx_config); study/peers's tests check them with `haproxy -c` and `nginx -t` and send the differential suite's cases through each (findings in docs/peers.md).")
}

// plotL7 draws each target's p50 latency per (load, connection, body),
// log scale.
func plotL7(data string, r *results.Results) (string, error) {
	l := r.L7
	if l == nil || len(l.Cells) == 0 {
		return "", errors.New("no L7 cells")
	}
	var rows [][]string
	for _, row := range l7Rows(l) {
		var body int
		fmt.Sscan(row[2], &body)
		line := []string{fmt.Sprintf("%q", fmt.Sprintf("%s %s %s", row[0], row[1], bodyName(body)))}
		for _, t := range results.L7Targets {
			v := "NaN"
			if c := l.Cell(t, row[0], row[1], body); c != nil && c.P50.N > 0 {
				v = fmt.Sprintf("%.4f", c.P50.Median)
			}
			line = append(line, v)
		}
		rows = append(rows, line)
	}
	f := filepath.Join(data, "l7-peers.dat")
	if err := writeDat(f, rows); err != nil {
		return "", err
	}
	return clustered(f, results.L7Targets, func(t string) string { return t },
		`set title "L7: median request latency by target (lower is better)"
set ylabel "p50 latency (ms, log scale)"
set logscale y
set xtics rotate by -20`), nil
}

// clustered is the script of a clustered histogram of f's columns 2 on
// (column 1 the cluster's label), one per target, named by name; head
// sets the title and axes. A NaN is a missing bar.
func clustered(f string, targets []string, name func(string) string, head string) string {
	var plots []string
	for i, t := range targets {
		using := fmt.Sprintf("%d", i+2)
		if i == 0 {
			using += ":xtic(1)"
		}
		plots = append(plots, fmt.Sprintf("'%s' using %s title '%s'", f, using, name(t)))
	}
	return fmt.Sprintf(`%s
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set datafile missing "NaN"
set key left top
set grid y
plot %s
`, head, strings.Join(plots, ", \\\n  "))
}
