package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/probe"
)

func runProbe(ctx context.Context, e *Env, args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	iface := fs.String("iface", "", "interface to probe (requests come in on it, answers leave by it)")
	port := fs.Uint("port", 0, "time only flows to this local port (0: every port)")
	every := fs.Duration("interval", time.Second, "how often to print")
	duration := fs.Duration("duration", 0, "stop after this long (0: at Ctrl-C)")
	nflows := fs.Int("flows", 10, "flows to show, busiest first")
	asJSON := fs.Bool("json", false, "print one JSON object per interval instead of the live view")
	clsact := fs.Bool("clsact", false, "attach with a clsact qdisc even where TCX is available")
	if err := e.Parse(fs, args); err != nil {
		return HelpOK(err)
	}
	if fs.NArg() > 0 {
		return Usagef("probe: unexpected arguments %q", fs.Args())
	}
	if *iface == "" {
		return Usagef("probe: -iface is required")
	}
	if *port > 65535 {
		return fmt.Errorf("probe: -port %d out of range", *port)
	}
	if *every <= 0 {
		return fmt.Errorf("probe: -interval %v must be positive", *every)
	}
	ifi, err := net.InterfaceByName(*iface)
	if err != nil {
		return fmt.Errorf("probe: interface %s: %w", *iface, err)
	}
	p, err := probe.Load(probe.Options{Port: uint16(*port), Clsact: *clsact})
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Attach(ifi.Index); err != nil {
		return err
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	start := time.Now()
	tk := time.NewTicker(*every)
	defer tk.Stop()
	for {
		done := false
		select {
		case <-ctx.Done():
			done = true
		case <-tk.C:
		}
		snap, err := readProbe(p, *iface, time.Since(start), *nflows)
		if err != nil {
			return err
		}
		if *asJSON {
			b, err := json.Marshal(snap)
			if err != nil {
				return fmt.Errorf("encode probe snapshot: %w", err)
			}
			fmt.Fprintf(e.Stdout, "%s\n", b)
		} else {
			if !done {
				fmt.Fprint(e.Stdout, "\033[H\033[2J") // redraw in place
			}
			printProbe(e.Stdout, snap)
		}
		if done {
			return nil
		}
	}
}

// probeSnapshot is one reading of the probe, as printed and as -json.
type probeSnapshot struct {
	Iface    string        `json:"iface"`
	Mode     probe.Mode    `json:"mode"`
	Seconds  float64       `json:"seconds"`
	Stats    probe.Stats   `json:"stats"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
	P999     time.Duration `json:"p999_ns"`
	Slots    []probeSlot   `json:"histogram"`
	Flows    []probe.Flow  `json:"flows"`
	AllFlows int           `json:"flows_total"`
}

type probeSlot struct {
	LoNs  uint64 `json:"lo_ns"`
	HiNs  uint64 `json:"hi_ns"`
	Count uint64 `json:"count"`
}

func readProbe(p *probe.Probe, iface string, since time.Duration, nflows int) (probeSnapshot, error) {
	s := probeSnapshot{Iface: iface, Mode: p.Mode(), Seconds: since.Seconds()}
	h, err := p.Histogram()
	if err != nil {
		return s, err
	}
	if s.Stats, err = p.Stats(); err != nil {
		return s, err
	}
	s.P50, s.P99, s.P999 = h.Quantile(0.5), h.Quantile(0.99), h.Quantile(0.999)
	for i, c := range h {
		if c > 0 {
			lo, hi := probe.SlotRange(i)
			s.Slots = append(s.Slots, probeSlot{lo, hi, c})
		}
	}
	flows, err := p.Flows()
	if err != nil {
		return s, err
	}
	s.AllFlows = len(flows)
	s.Flows = flows[:min(len(flows), nflows)]
	return s, nil
}

func printProbe(w io.Writer, s probeSnapshot) {
	fmt.Fprintf(w, "shield probe on %s (%s), %.0fs: %d requests, %d answered; p50 %v p99 %v p99.9 %v\n\n",
		s.Iface, s.Mode, s.Seconds, s.Stats.Requests, s.Stats.Answered, round(s.P50), round(s.P99), round(s.P999))
	var most uint64
	for _, sl := range s.Slots {
		most = max(most, sl.Count)
	}
	for _, sl := range s.Slots {
		bar := strings.Repeat("#", int((sl.Count*50+most-1)/most))
		fmt.Fprintf(w, "%10v .. %-10v %8d %s\n", round(time.Duration(sl.LoNs)), round(time.Duration(sl.HiNs)), sl.Count, bar)
	}
	fmt.Fprintf(w, "\n%-44s %-5s %8s %10s %10s %10s\n", "flow (client > server)", "proto", "requests", "mean", "p50", "p99")
	for _, f := range s.Flows {
		fmt.Fprintf(w, "%-44s %-5s %8d %10v %10v %10v\n", f.Client.String()+" > "+f.Server.String(), f.Proto, f.Count, round(f.Mean), round(f.P50), round(f.P99))
	}
	if s.AllFlows > len(s.Flows) {
		fmt.Fprintf(w, "(%d more flows)\n", s.AllFlows-len(s.Flows))
	}
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(100 * time.Nanosecond)
}
