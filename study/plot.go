package study

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/probe"
)

// Plot draws the PNG plots into dir with gnuplot (Debian's gnuplot-nox,
// installed by ci/deps.sh) and returns their file names. The data files
// gnuplot reads stay beside them (plots/*.dat), as does each script.
func Plot(dir string, r *Results) ([]string, error) {
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
		fn      func(data string, r *Results) (string, error)
	}{
		{"latency-cdf.png", SectionMain, plotCDF},
		{"throughput.png", SectionMain, plotThroughput},
		{"drop-capacity.png", SectionMain, plotDrop},
		{"probe-vs-client.png", SectionMain, plotProbe},
		{"l7-peers.png", SectionPeers, plotL7},
		{"lists.png", SectionLists, plotLists},
	} {
		if !r.ran(p.section) {
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

func plotCDF(data string, r *Results) (string, error) {
	var plots []string
	for _, c := range Configs {
		l := r.legit(c.Name, PhaseFixed)
		if l == nil || len(l.pooled) == 0 {
			continue
		}
		f := filepath.Join(data, "cdf-"+safeName(c.Name)+".dat")
		if err := writeDat(f, cdfRows(l.pooled)); err != nil {
			return "", err
		}
		dash := ""
		if c.Storm {
			dash = " dt 2"
		}
		plots = append(plots, fmt.Sprintf("'%s' using 1:2 with lines lw 2%s title '%s'", f, dash, c.Name))
	}
	if len(plots) == 0 {
		return "", errors.New("no latencies")
	}
	return fmt.Sprintf(`set title "Legitimate keep-alive request latency, fixed rate, every run (dashed: under storm)"
set xlabel "latency (ms, log scale)"
set ylabel "fraction of requests"
set logscale x
set key right bottom
set grid
plot %s
`, strings.Join(plots, ", \\\n  ")), nil
}

func plotThroughput(data string, r *Results) (string, error) {
	var rows [][]string
	for i, c := range Configs {
		l := r.legit(c.Name, PhaseSaturation)
		if l == nil {
			continue
		}
		rows = append(rows, []string{fmt.Sprint(i), fmt.Sprintf("%q", c.Name), fmt.Sprintf("%.1f", l.RPS.Median), fmt.Sprintf("%.1f", l.RPS.Min), fmt.Sprintf("%.1f", l.RPS.Max)})
	}
	if len(rows) == 0 {
		return "", errors.New("no throughput")
	}
	f := filepath.Join(data, "throughput.dat")
	if err := writeDat(f, rows); err != nil {
		return "", err
	}
	return fmt.Sprintf(`set title "Legitimate throughput at saturation (keep-alive, back to back): median, min-max over runs"
set ylabel "requests/s"
set style fill solid 0.6
set boxwidth 0.7
set xtics rotate by -30
set yrange [0:*]
set grid ytics
unset key
plot '%s' using 1:3:xtic(2) with boxes, '' using 1:3:4:5 with yerrorbars lc black pt 0
`, f), nil
}

func plotDrop(data string, r *Results) (string, error) {
	var rows [][]string
	for _, t := range DropTargets {
		row := []string{fmt.Sprintf("%q", dropName(t))}
		for _, src := range DropSources {
			d := r.drop(t, src)
			if d == nil {
				row = append(row, "0", "0", "0")
				continue
			}
			row = append(row, fmt.Sprintf("%.3f", d.DropPPS.Median/1e6), fmt.Sprintf("%.3f", d.DropPPS.Min/1e6), fmt.Sprintf("%.3f", d.DropPPS.Max/1e6))
		}
		rows = append(rows, row)
	}
	f := filepath.Join(data, "drop.dat")
	if err := writeDat(f, rows); err != nil {
		return "", err
	}
	return fmt.Sprintf(`set title "Drop capacity: frames dropped per second at the edge, generator at full speed (median, min-max)"
set ylabel "Mpps dropped"
set style data histograms
set style histogram errorbars gap 2 lw 1
set style fill solid 0.6
set yrange [0:*]
set grid ytics
set key left top
plot '%s' using 2:3:4:xtic(1) title 'few sources', '' using 5:6:7 title 'many forged sources'
`, f), nil
}

func plotProbe(data string, r *Results) (string, error) {
	var plots []string
	for _, c := range Configs {
		l := r.legit(c.Name, PhaseFixed)
		if l == nil || l.probeKA == nil || !c.Probe {
			continue
		}
		fc := filepath.Join(data, "probe-client-"+safeName(c.Name)+".dat")
		if err := writeDat(fc, cdfRows(l.pooled)); err != nil {
			return "", err
		}
		fp := filepath.Join(data, "probe-"+safeName(c.Name)+".dat")
		if err := writeDat(fp, histCDF(l.probeKA)); err != nil {
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
