package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/workbench"
)

// WriteJSON writes v (a storm's Result, a study's results) to path,
// indented.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Human renders a count or a rate in 3 or 4 figures: 950, 1.5k, 12k, 1.25M.
func Human(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.0fk", x/1e3)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

// ProgressLine renders p on one line (without newline).
func ProgressLine(p Progress) string {
	var drops []string
	keys := make([]string, 0, len(p.DropPPS))
	for k := range p.DropPPS {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		drops = append(drops, fmt.Sprintf("%s %s", k, Human(p.DropPPS[k])))
	}
	d := strings.Join(drops, " ")
	if d == "" {
		d = "-"
	}
	api := "ok"
	if !p.APIOK {
		api = "FAIL"
	}
	pass, table := Human(p.PassPPS), fmt.Sprint(p.Sources)
	if !p.Shield {
		pass, d, table = "-", "no program", "-"
	}
	return fmt.Sprintf("%-22s %4.1f/%.0fs  sent %7s pps  pass %6s pps  drop/s [%s]  legit %d req (%d failed) p99 new %.1f ms ka %.1f ms udp %.1f ms  api %s  table %s",
		p.Phase, p.Elapsed.Seconds(), p.Length.Seconds(), Human(p.SentPPS), pass, d,
		p.Requests, p.Failures, ms(p.P99[parts.NewConn]), ms(p.P99[parts.KeepAlive]), ms(p.P99[parts.Datagram]), api, table)
}

// PrintTable writes the final table and the assertions.
func PrintTable(w io.Writer, res *Result) {
	fmt.Fprintf(w, "\nxdpshield storm: kernel %s, generator %s, rate %s, %.0fs phases, table %d, limit %d/s burst %d, admission %d/s\n",
		res.Kernel, res.Generator, rateName(res.Rate), res.Phase, res.TableSize, res.Limits.Rate, res.Limits.Burst, res.Limits.AdmissionRate)
	fmt.Fprintf(w, "legitimate client: %s\n\n", res.LegitNote)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\treq/s\tsuccess\tnew p50\tnew p99\tka p50\tka p99\tudp ok\tudp p99\tsent\tsent pps\tpass ok\tallow\tdrop limit\tadmission\tdeny\tveth drop\tapi\ttable max\t")
	rows := append(append([]*Phase{}, res.Phases...), res.Contrast...)
	for _, p := range rows {
		n, k, u := p.Legit.Kinds[parts.NewConn.String()], p.Legit.Kinds[parts.KeepAlive.String()], p.Legit.Kinds[parts.Datagram.String()]
		c := p.Counters
		get := func(m map[string]uint64, key string) string {
			if c == nil {
				return "-"
			}
			return Human(float64(m[key]))
		}
		var pm, am map[string]uint64
		if c != nil {
			pm, am = c.Pass, c.Drop
		}
		api := "-"
		if p.API != nil {
			api = fmt.Sprintf("%d/%d", p.API.Polls-p.API.Failures, p.API.Polls)
		}
		table := "-"
		if p.Shield {
			table = fmt.Sprint(p.Table.Max)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f%%\t%.1fms\t%.1fms\t%.1fms\t%.1fms\t%.1f%%\t%.1fms\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			p.Name, p.Legit.RatePerSec, 100*p.Legit.Success, n.P50Ms, n.P99Ms, k.P50Ms, k.P99Ms, 100*u.success(), u.P99Ms,
			Human(float64(p.Sent.Frames)), Human(p.Sent.PPS),
			get(pm, "ok"), get(pm, "allow"), get(am, "limit"), get(am, "admission"), get(am, "deny"),
			Human(float64(p.Veth.Dropped)), api, table)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nassertions:")
	printChecks(w, res.Phases, "")
	if len(res.Contrast) > 0 {
		fmt.Fprintln(w, "\ncontrast, no program attached: the budget must break")
		printChecks(w, res.Contrast, "broken")
	}
	if res.Error != "" {
		fmt.Fprintf(w, "\nINCOMPLETE: %s\n", res.Error)
	} else if res.OK {
		fmt.Fprintln(w, "\nPASS: every assertion held")
	} else {
		fmt.Fprintf(w, "\nFAIL: %d assertion(s) failed\n", len(res.Failed))
	}
}

// printChecks lists the checks of phases; a failed budget check is marked
// budgetFailed instead of FAIL when that is what the phase is for.
func printChecks(w io.Writer, phases []*Phase, budgetFailed string) {
	for _, p := range phases {
		for _, c := range p.Checks {
			mark := "ok"
			switch {
			case c.OK:
			case c.Budget && budgetFailed != "":
				mark = budgetFailed
			default:
				mark = "FAIL"
			}
			fmt.Fprintf(w, "  %-6s %-22s %-32s %s\n", mark, p.Name, c.Name, c.Detail)
		}
	}
}

func rateName(r uint64) string {
	if r == 0 {
		return "full speed"
	}
	return Human(float64(r)) + " pps"
}

// ProgressJSON is p as one line of `shieldlab storm -progress-json` (the
// workbench reads it: workbench.StormProgress), latencies in ms by kind.
func ProgressJSON(p Progress) []byte {
	ms := func(d [parts.NumKinds]time.Duration) map[string]float64 {
		m := map[string]float64{}
		for k := range parts.NumKinds {
			m[k.String()] = float64(d[k].Microseconds()) / 1000
		}
		return m
	}
	drop := p.DropPPS
	if drop == nil {
		drop = map[string]float64{}
	}
	// The line's type is the workbench's, which reads it (the product
	// cannot import the lab; the lab imports the product).
	b, _ := json.Marshal(workbench.StormProgress{Phase: p.Phase, Shield: p.Shield,
		Elapsed: p.Elapsed.Seconds(), Length: p.Length.Seconds(), SentPPS: p.SentPPS, PassPPS: p.PassPPS,
		DropPPS: drop, P50Ms: ms(p.P50), P99Ms: ms(p.P99), Requests: p.Requests, Failures: p.Failures,
		APIOK: p.APIOK, Sources: p.Sources})
	return b
}
