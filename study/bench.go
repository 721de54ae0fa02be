package study

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"golang.org/x/perf/benchfmt"

	"github.com/xdpshield/xdpshield/study/results"
)

// simBench runs the simulator's benchmarks (the go tool, in the source
// tree the study runs from) and parses their ns/pkt and x-ref metrics.
func simBench(ctx context.Context, quick bool) ([]results.BenchRow, string, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return nil, "", fmt.Errorf("no go tool: %w", err)
	}
	n := "2000000x"
	if quick {
		n = "100000x"
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^$", "-bench", ".", "-benchtime", n, "./shield/datapath")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, string(out), fmt.Errorf("go test -bench ./shield/datapath: %w: %s", err, tail(string(out)))
	}
	rows := parseBench(string(out))
	if len(rows) == 0 {
		return nil, string(out), fmt.Errorf("go test -bench ./shield/datapath printed no ns/pkt")
	}
	return rows, string(out), nil
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "; ")
}

// parseBench reads `BenchmarkX/y-2  N  T ns/op  A ns/pkt  B x-ref ...`
// lines (golang.org/x/perf/benchfmt: the Go benchmark format), keeping the
// rows with an ns/pkt metric.
func parseBench(out string) []results.BenchRow {
	var rows []results.BenchRow
	rd := benchfmt.NewReader(strings.NewReader(out), "bench")
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue // a syntax error or a unit line: not a result
		}
		base, parts := res.Name.Parts()
		name := "Benchmark" + string(base)
		for _, p := range parts {
			if p[0] != '-' { // "-GOMAXPROCS" is left out
				name += string(p)
			}
		}
		r := results.BenchRow{Name: name}
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" { // benchfmt tidies ns/pkt to sec/pkt
				unit, val = v.OrigUnit, v.OrigValue
			}
			switch unit {
			case "ns/pkt":
				r.NsPkt = val
			case "x-ref":
				r.XRef = val
			}
		}
		if r.NsPkt > 0 {
			rows = append(rows, r)
		}
	}
	return rows
}
