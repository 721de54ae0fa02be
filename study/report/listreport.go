package report

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/xdpshield/xdpshield/study/results"
)

func listName(t string) string {
	return map[string]string{"floor": "XDP_DROP everything (floor)", "shield": "shield deny list", "xdp-filter": "xdp-filter (src list)"}[t]
}

// ReportLists writes the list comparison's section.
func ReportLists(w io.Writer, r *results.Results) {
	l := r.Lists
	fmt.Fprintln(w, "\n## Large deny lists: the shield beside xdp-filter")
	if l == nil {
		fmt.Fprintln(w, "\nNot measured.")
		return
	}
	fmt.Fprintf(w, "\nThe storm link of the main section (same veth, same generator, same run): UDP frames at full speed from the first min(N, 65,536) addresses of a deny list of N host prefixes (IPv4: 198.19.0.0 upward; IPv6: 2001:db8:1::1 upward, one family at a time), against the XDP_DROP floor, the shield (shield.Load, the list added with Shield.Add as `shield deny add` does) and xdp-tools' xdp-filter (%s; `xdp-filter load edge0 -f ipv4,ipv6 -p allow -m native` in the edge namespace (its default policy, allow: the addresses listed are dropped; `-p deny` would drop every other), the list written into its pinned map filter_ipv4/filter_ipv6 one update per entry, unloaded after each cell). Load: the time to write the list (the shield's includes computing its verdict trie). Mpps: medians over runs (min–max).\n", l.XDPFilter)
	fmt.Fprintln(w, "\n| family | list size | target | load s | seen Mpps | dropped Mpps | drops per softirq CPU-s |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|")
	for _, fam := range results.ListFamilies {
		if c := l.Cell("floor", fam, 0); c != nil {
			fmt.Fprintf(w, "| %s | - | %s | - | %s | %s | %s |\n", fam, listName("floor"), mppsSpread(c.SeenPPS), mppsSpread(c.DropPPS), humanOr(c.PerCPU.Median))
		}
		for _, n := range l.Sizes {
			for _, t := range results.ListTargets[1:] {
				c := l.Cell(t, fam, n)
				if c == nil {
					continue
				}
				if c.Refused != "" {
					fmt.Fprintf(w, "| %s | %d | %s | refused: %s | - | - | - |\n", fam, n, listName(t), strings.ReplaceAll(c.Refused, "|", "/"))
					continue
				}
				fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s |\n", fam, n, listName(t), results.Spread(c.LoadSec, "%.3f"), mppsSpread(c.SeenPPS), mppsSpread(c.DropPPS), humanOr(c.PerCPU.Median))
			}
		}
	}
	if len(l.CLISec) > 0 {
		fmt.Fprintf(w, "\nAdding addresses with xdp-filter's own command, one `xdp-filter ip ADDR -m src` a address (%d addresses a run): %s ms an address; a 1,000-entry list that way takes about %.0f s.\n", l.CLIAddrs, results.Spread(l.CLIPerMs, "%.1f"), l.CLIPerMs.Median)
	}
	for _, s := range l.Skipped {
		fmt.Fprintf(w, "\nNot measured: %s.\n", s)
	}
}

func mppsSpread(s results.Stat) string {
	return fmt.Sprintf("%s (%s–%s)", results.Mpps(s.Median), results.Mpps(s.Min), results.Mpps(s.Max))
}

func humanOr(x float64) string {
	if x <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fM", x/1e6)
}

// plotLists draws the dropped Mpps per list size and target, per family.
func plotLists(data string, r *results.Results) (string, error) {
	l := r.Lists
	if l == nil || len(l.Cells) == 0 {
		return "", errNoLists
	}
	var rows [][]string
	for _, fam := range results.ListFamilies {
		for _, n := range l.Sizes {
			line := []string{fmt.Sprintf("%q", fmt.Sprintf("%s %d", fam, n))}
			for _, t := range results.ListTargets {
				size := n
				if t == "floor" {
					size = 0
				}
				v := "NaN"
				if c := l.Cell(t, fam, size); c != nil && c.DropPPS.N > 0 {
					v = fmt.Sprintf("%.4f", c.DropPPS.Median/1e6)
				}
				line = append(line, v)
			}
			rows = append(rows, line)
		}
	}
	f := filepath.Join(data, "lists.dat")
	if err := writeDat(f, rows); err != nil {
		return "", err
	}
	return clustered(f, results.ListTargets, listName,
		`set title "Deny list drop capacity by list size (no bar: the list does not fit)"
set ylabel "dropped Mpps (at the edge)"
set yrange [0:*]`), nil
}

var errNoLists = errors.New("no list cells")
