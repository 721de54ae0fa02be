package report

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/probe"
	"github.com/xdpshield/xdpshield/study/results"
)

// Plot draws the PNG plots into dir with gnuplot (Debian's gnuplot-nox,
// installed by ci/deps.sh) and returns their file names. The data files
// gnuplot reads stay beside them (plots/*.dat), as does each script.
func Plot(dir string, r *results.Results) ([]string, error) {
	gp, err := exec.LookPath("gnuplot")
	if err != nil {
		return nil, errors.New("gnuplot not installed (ci/deps.sh installs gnuplot-nox)")
	}
	data := filepath.Join(dir, "plots")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	var made []string
	var errs []error
	for _, p := range []struct {
		name    string
		section string
		fn      func(data string, r *results.Results) (string, error)
	}{
		{"latency-cdf.png", results.SectionMain, plotCDF},
		{"throughput.png", results.SectionMain, plotThroughput},
		{"drop-capacity.png", results.SectionMain, plotDrop},
		{"probe-vs-client.png", results.SectionMain, plotProbe},
		{"edge-cpu.png", results.SectionMain, plotCPU},
		{"datagram-storm.png", results.SectionMain, plotDatagram},
		{"l7-peers.png", results.SectionPeers, plotL7},
		{"lists.png", results.SectionLists, plotLists},
	} {
		if !r.Ran(p.section) {
			continue
		}
		script, err := p.fn(data, r)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
			continue
		}
		script = fmt.Sprintf("set terminal pngcairo noenhanced size 960,540 font 'sans,10'\nset output '%s'\n%s", filepath.Join(dir, p.name), script)
		sf := filepath.Join(data, strings.TrimSuffix(p.name, ".png")+".gp")
		if err := os.WriteFile(sf, []byte(script), 0o644); err != nil {
			errs = append(errs, err)
			continue
		}
		var stderr bytes.Buffer
		cmd := exec.Command(gp, sf)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			errs = append(errs, fmt.Errorf("gnuplot %s: %w: %s", sf, err, strings.TrimSpace(stderr.String())))
			continue
		}
		made = append(made, p.name)
	}
	return made, errors.Join(errs...)
}

func writeDat(path string, rows [][]string) error {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(strings.Join(r, "\t"))
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func safeName(s string) string {
	return strings.NewReplacer("/", "_", "+", "-").Replace(s)
}

// cdfRows turns latencies into (ms, fraction) points, at most ~1000.
func cdfRows(d []time.Duration) [][]string {
	s := slices.Clone(d)
	slices.Sort(s)
	step := max(1, len(s)/1000)
	var rows [][]string
	for i := 0; i < len(s); i += step {
		rows = append(rows, []string{fmt.Sprintf("%.4f", float64(s[i])/1e6), fmt.Sprintf("%.5f", float64(i+1)/float64(len(s)))})
	}
	if len(s) > 0 {
		rows = append(rows, []string{fmt.Sprintf("%.4f", float64(s[len(s)-1])/1e6), "1"})
	}
	return rows
}

// colour is the one colour of a configuration in every plot.
func colour(name string) string {
	palette := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000"}
	for i, c := range results.Configs {
		if c.Name == name {
			return palette[i%len(palette)]
		}
	}
	return "#000000"
}

// rgbInt is a "#rrggbb" colour as the integer gnuplot's "lc rgb
// variable" reads from a data column.
func rgbInt(hex string) string {
	v, _ := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	return strconv.FormatUint(v, 10)
}

// tailRows turns latencies into (ms, fraction slower) points: the
// complementary CDF, whose log axis shows p99 at 1e-2 and p99.9 at 1e-3.
func tailRows(d []time.Duration) [][]string {
	s := slices.Clone(d)
	slices.Sort(s)
	n := len(s)
	step := max(1, n/2000)
	var rows [][]string
	for i := 0; i < n; i += step {
		if n-i-1 == 0 {
			break
		}
		rows = append(rows, []string{fmt.Sprintf("%.4f", float64(s[i])/1e6), fmt.Sprintf("%.6f", float64(n-i-1)/float64(n))})
	}
	// The last tenth of a percent point by point: the tail is the point.
	for i := max(0, n-n/100-1); i < n-1; i++ {
		rows = append(rows, []string{fmt.Sprintf("%.4f", float64(s[i])/1e6), fmt.Sprintf("%.6f", float64(n-i-1)/float64(n))})
	}
	slices.SortStableFunc(rows, func(a, b []string) int { return strings.Compare(b[1], a[1]) })
	return rows
}

// tailPlot draws the complementary CDFs of lat per configuration.
func tailPlot(data, prefix, title string, r *results.Results, lat func(*results.Legit) []time.Duration, only func(results.Config) bool) (string, error) {
	var plots []string
	for _, c := range results.Configs {
		l := r.LegitOf(c.Name, results.PhaseFixed)
		if l == nil || len(lat(l)) == 0 || !only(c) {
			continue
		}
		f := filepath.Join(data, prefix+safeName(c.Name)+".dat")
		if err := writeDat(f, tailRows(lat(l))); err != nil {
			return "", err
		}
		dash := ""
		if c.Storm {
			dash = " dt 2"
		}
		plots = append(plots, fmt.Sprintf("'%s' using 1:2 with lines lw 2 lc rgb '%s'%s title '%s (n=%d)'", f, colour(c.Name), dash, c.Name, len(lat(l))))
	}
	if len(plots) == 0 {
		return "", errors.New("no latencies")
	}
	return fmt.Sprintf(`set title "%s"
set xlabel "latency (ms, log scale)"
set ylabel "fraction of requests slower (log scale)"
set logscale xy
set yrange [1e-4:1]
set ytics ("1" 1, "0.1 (p90)" 0.1, "0.01 (p99)" 0.01, "0.001 (p99.9)" 0.001, "1e-4" 0.0001)
set key outside right top
set grid
plot %s
`, title, strings.Join(plots, ", \\\n  ")), nil
}

func plotCDF(data string, r *results.Results) (string, error) {
	return tailPlot(data, "tail-", "Legitimate keep-alive latency, fixed rate, every run pooled (dashed: under storm); a line ends where its sample does", r,
		func(l *results.Legit) []time.Duration { return l.PooledKA }, func(results.Config) bool { return true })
}

func plotDatagram(data string, r *results.Results) (string, error) {
	return tailPlot(data, "udp-", "Datagram service latency, fixed rate, every run pooled: under storm (dashed) and quiet", r,
		func(l *results.Legit) []time.Duration { return l.PooledDatagram }, func(c results.Config) bool { return c.Storm || c.Name == "shield" || c.Name == "none" })
}

// plotCPU draws the edge's CPU per request of every configuration.
func plotCPU(data string, r *results.Results) (string, error) {
	return configBars(data, "cpu.dat", r, results.PhaseFixed, func(l *results.Legit) (results.Stat, bool) { return l.CPUReq, l.CPUReq.N > 0 },
		`set title "Edge CPU per legitimate request, fixed rate (server process + every CPU's softirq): median, min-max over runs"
set ylabel "µs per request (log scale)"
set logscale y
set style fill solid 0.7`, "no CPU figures")
}

func plotThroughput(data string, r *results.Results) (string, error) {
	return configBars(data, "throughput.dat", r, results.PhaseSaturation, func(l *results.Legit) (results.Stat, bool) { return l.RPS, true },
		`set title "Legitimate throughput at saturation (keep-alive, back to back): median, min-max over runs"
set ylabel "requests/s"
set style fill solid 0.6
set yrange [0:*]`, "no throughput")
}

// configBars plots one bar per configuration with a figure in phase (the
// median, its min-max over runs as an error bar, the configuration's
// colour): its data in name under data, head the title and axes.
func configBars(data, name string, r *results.Results, phase string, fig func(*results.Legit) (results.Stat, bool), head, none string) (string, error) {
	var rows [][]string
	for i, c := range results.Configs {
		l := r.LegitOf(c.Name, phase)
		if l == nil {
			continue
		}
		st, ok := fig(l)
		if !ok {
			continue
		}
		rows = append(rows, []string{fmt.Sprint(i), fmt.Sprintf("%q", c.Name), fmt.Sprintf("%.1f", st.Median), fmt.Sprintf("%.1f", st.Min), fmt.Sprintf("%.1f", st.Max), rgbInt(colour(c.Name))})
	}
	if len(rows) == 0 {
		return "", errors.New(none)
	}
	f := filepath.Join(data, name)
	if err := writeDat(f, rows); err != nil {
		return "", err
	}
	return fmt.Sprintf(`%s
set boxwidth 0.7
set xtics rotate by -45 left
set bmargin 7
set grid ytics
unset key
plot '%s' using 1:3:6:xtic(2) with boxes lc rgb variable, '' using 1:3:4:5 with yerrorbars lc black pt 0
`, head, f), nil
}

func plotDrop(data string, r *results.Results) (string, error) {
	var rows [][]string
	for i, t := range results.DropTargets {
		// Short labels: the long names overlap under the bars.
		row := []string{fmt.Sprint(i), fmt.Sprintf("%q", t)}
		for _, src := range results.DropSources {
			d := r.DropOf(t, src)
			if d == nil {
				row = append(row, "0", "0", "0", "0")
				continue
			}
			y := d.DropPPS
			if t == "generator" {
				y = d.SentPPS // it drops nothing: its bar is what it sent
			}
			row = append(row, fmt.Sprintf("%.3f", y.Median/1e6), fmt.Sprintf("%.3f", y.Min/1e6), fmt.Sprintf("%.3f", y.Max/1e6), fmt.Sprintf("%.3f", d.SentPPS.Median/1e6))
		}
		rows = append(rows, row)
	}
	f := filepath.Join(data, "drop.dat")
	if err := writeDat(f, rows); err != nil {
		return "", err
	}
	return fmt.Sprintf(`set title "Drop capacity: Mpps dropped at the edge (median, min-max); points: the generator's rate in the same phase"
set ylabel "Mpps"
set style fill solid 0.6
set boxwidth 0.35
set xrange [-0.6:%d.6]
set yrange [0:*]
set grid ytics
set key outside right top
plot '%s' using ($1-0.2):3:xtic(2) with boxes lc rgb '#1f77b4' title 'few sources', \
  '' using ($1-0.2):3:4:5 with yerrorbars lc black pt 0 notitle, \
  '' using ($1+0.2):7 with boxes lc rgb '#ff7f0e' title 'many forged sources', \
  '' using ($1+0.2):7:8:9 with yerrorbars lc black pt 0 notitle, \
  '' using ($1-0.2):6 with points pt 7 ps 1.2 lc rgb '#d62728' title "generator's rate, few", \
  '' using ($1+0.2):10 with points pt 9 ps 1.4 lc rgb '#d62728' title "generator's rate, many"
`, len(results.DropTargets)-1, f), nil
}

func plotProbe(data string, r *results.Results) (string, error) {
	var plots []string
	for _, c := range results.Configs {
		l := r.LegitOf(c.Name, results.PhaseFixed)
		if l == nil || l.ProbeKAHist == nil || !c.Probe {
			continue
		}
		fc := filepath.Join(data, "probe-client-"+safeName(c.Name)+".dat")
		if err := writeDat(fc, cdfRows(l.PooledKA)); err != nil {
			return "", err
		}
		fp := filepath.Join(data, "probe-"+safeName(c.Name)+".dat")
		if err := writeDat(fp, histCDF(l.ProbeKAHist)); err != nil {
			return "", err
		}
		plots = append(plots, fmt.Sprintf("'%s' using 1:2 with lines lw 2 title 'client, %s', '%s' using 1:2 with steps lw 2 title 'probe, %s'", fc, c.Name, fp, c.Name))
	}
	if len(plots) == 0 {
		return "", errors.New("no probe histogram")
	}
	return fmt.Sprintf(`set title "The probe's request times on the keep-alive flows (edge side) against the client's own, fixed rate"
set xlabel "latency (ms, log scale)"
set ylabel "fraction of requests"
set logscale x
set key right bottom
set grid
plot %s
`, strings.Join(plots, ", \\\n  ")), nil
}

// histCDF turns a probe histogram into (upper bound ms, fraction) steps.
func histCDF(h *probe.Histogram) [][]string {
	n := h.Count()
	var rows [][]string
	var seen uint64
	for i, c := range h {
		if c == 0 {
			continue
		}
		lo, hi := probe.SlotRange(i)
		if len(rows) == 0 {
			rows = append(rows, []string{fmt.Sprintf("%.4f", float64(lo)/1e6), "0"})
		}
		seen += c
		rows = append(rows, []string{fmt.Sprintf("%.4f", float64(hi)/1e6), fmt.Sprintf("%.5f", float64(seen)/float64(n))})
	}
	return rows
}
