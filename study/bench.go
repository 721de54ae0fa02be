package study

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// BenchRow is one line of the simulator's benchmark table.
type BenchRow struct {
	Name  string  `json:"name"`
	NsPkt float64 `json:"ns_per_packet"`
	XRef  float64 `json:"x_xdp_drop"`
}

// simBench runs the simulator's benchmarks (the go tool, in the source
// tree the study runs from) and parses their ns/pkt and x-ref metrics.
func simBench(ctx context.Context, quick bool) ([]BenchRow, string, error) {
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

// parseBench reads `BenchmarkX/y-2  N  T ns/op  A ns/pkt  B x-ref ...` lines.
func parseBench(out string) []BenchRow {
	var rows []BenchRow
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		r := BenchRow{Name: f[0]}
		if i := strings.LastIndexByte(r.Name, '-'); i > 0 {
			if _, err := strconv.Atoi(r.Name[i+1:]); err == nil {
				r.Name = r.Name[:i]
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/pkt":
				r.NsPkt = v
			case "x-ref":
				r.XRef = v
			}
		}
		if r.NsPkt > 0 {
			rows = append(rows, r)
		}
	}
	return rows
}
