package study

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/e2e"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/sim"
)

// LiveRow is one live-path figure: a receiver on the storm link's far end
// fed by the live-frames generator at full speed from a few sources.
type LiveRow struct {
	Target      string  `json:"target"` // generator (alone), floor (XDP_DROP), shield
	Mpps        float64 `json:"mpps"`   // frames the generator sent per second
	NsFrame     float64 `json:"ns_per_frame"`
	NsOverGen   float64 `json:"ns_over_generator"` // NsFrame less the generator's own
	GeneratorMx float64 `json:"generator_x_floor,omitempty"`
}

// LiveBench measures the live path for `make bench`, beside the
// simulator's BPF_PROG_TEST_RUN figures: the generator alone, XDP_DROP
// and the shield (the study's limits, the default table), each for d,
// in a throwaway topology. It needs root and the live-frames generator.
func LiveBench(ctx context.Context, d time.Duration) ([]LiveRow, error) {
	unlock, err := e2e.LockStorms(ctx, slog.Default())
	if err != nil {
		return nil, err
	}
	defer unlock()
	top, err := e2e.NewTopology()
	if err != nil {
		return nil, err
	}
	defer top.Close()
	gen, err := e2e.NewGenerator("auto", top.Storm, top.StormIfindex)
	if err != nil {
		return nil, err
	}
	defer gen.Close()
	if gen.Name() != LiveFrames {
		return nil, fmt.Errorf("generator-bound: the %s generator (BPF_F_TEST_XDP_LIVE_FRAMES needs kernel 5.18+) sets every live figure", gen.Name())
	}
	var tpls []e2e.Template
	for _, p := range []e2e.Proto{e2e.UDP, e2e.TCPSYN, e2e.ICMP} {
		for _, f := range []e2e.Flow{{Proto: p, First: e2e.Few4, Count: 16}, {Proto: p, First: e2e.Few6, Count: 16}} {
			dst := e2e.Edge4
			if f.First.Is6() {
				dst = e2e.Edge6
			}
			t, err := e2e.BuildTemplate(f, top.StormMAC, top.EdgeMAC, dst)
			if err != nil {
				return nil, err
			}
			tpls = append(tpls, t)
		}
	}
	var rows []LiveRow
	for _, target := range []string{"generator", "floor", "shield"} {
		var l link.Link
		var sh *shield.Shield
		switch target {
		case "generator":
			if err := top.StormGRO(false); err != nil {
				return nil, err
			}
		case "floor":
			prog, err := sim.DropProgram()
			if err != nil {
				return nil, err
			}
			err = top.Edge.Do(func() (err error) {
				l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: top.EdgeIfindex})
				return err
			})
			prog.Close()
			if err != nil {
				return nil, err
			}
		case "shield":
			if sh, err = shield.Load(shield.Options{TableSize: shield.DefaultTableSize, Limits: Limits()}); err != nil {
				return nil, err
			}
			if err := top.Edge.Do(func() (err error) {
				l, err = link.AttachXDP(link.XDPOptions{Program: sh.Program(), Interface: top.EdgeIfindex})
				return err
			}); err != nil {
				sh.Close()
				return nil, err
			}
		}
		start := time.Now()
		per, err := fullSpeed(ctx, gen, tpls, nil, d)
		secs := time.Since(start).Seconds()
		if l != nil {
			l.Close()
		}
		if sh != nil {
			sh.Close()
		}
		if target == "generator" {
			if gerr := top.StormGRO(true); gerr != nil && err == nil {
				err = gerr
			}
		}
		if err != nil {
			return rows, err
		}
		var sent uint64
		for _, n := range per {
			sent += n
		}
		r := LiveRow{Target: target, Mpps: float64(sent) / secs / 1e6}
		if r.Mpps > 0 {
			r.NsFrame = 1e3 / r.Mpps
		}
		if len(rows) > 0 {
			r.NsOverGen = r.NsFrame - rows[0].NsFrame
		}
		rows = append(rows, r)
	}
	if fl := rows[1].Mpps; fl > 0 {
		rows[0].GeneratorMx = rows[0].Mpps / fl
	}
	return rows, nil
}

// WriteLive prints rows as `make bench` shows them.
func WriteLive(w io.Writer, rows []LiveRow) {
	fmt.Fprintln(w, "live path (BPF_F_TEST_XDP_LIVE_FRAMES generator into a veth, the program on the far end; few sources):")
	fmt.Fprintf(w, "%-10s %8s %10s %18s\n", "target", "Mpps", "ns/frame", "ns over generator")
	for _, r := range rows {
		over := "-"
		if r.Target != "generator" {
			over = fmt.Sprintf("%.1f", r.NsOverGen)
		}
		fmt.Fprintf(w, "%-10s %8.2f %10.1f %18s\n", r.Target, r.Mpps, r.NsFrame, over)
	}
	if len(rows) > 1 && rows[0].GeneratorMx < GeneratorMargin {
		fmt.Fprintf(w, "GENERATOR-BOUND: the generator alone is %.2fx the XDP_DROP floor (wanted >= %.1fx): the figures above measure the generator\n", rows[0].GeneratorMx, GeneratorMargin)
	} else if len(rows) > 1 {
		fmt.Fprintf(w, "the generator alone is %.2fx the XDP_DROP floor; compare `ns over generator` with the test_run ns/pkt above\n", rows[0].GeneratorMx)
	}
}

// liveOf is the study's own drop-capacity figures from the few sources as
// LiveBench prints them, for the report's table beside the simulator's.
func liveOf(r *Results) []LiveRow {
	var rows []LiveRow
	for _, t := range []string{"generator", "floor", "shield"} {
		d := r.drop(t, "few")
		if d == nil || d.SentPPS.N == 0 {
			return nil
		}
		med := statOf(func() []float64 {
			var xs []float64
			for _, s := range d.Samples {
				xs = append(xs, s.SentPPS)
			}
			return xs
		}()).Median
		row := LiveRow{Target: t, Mpps: med / 1e6}
		if med > 0 {
			row.NsFrame = 1e9 / med
		}
		if len(rows) > 0 {
			row.NsOverGen = row.NsFrame - rows[0].NsFrame
		}
		rows = append(rows, row)
	}
	if rows[1].Mpps > 0 {
		rows[0].GeneratorMx = rows[0].Mpps / rows[1].Mpps
	}
	return rows
}
