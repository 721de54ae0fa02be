package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/study"
	"github.com/xdpshield/xdpshield/study/proc"
	"github.com/xdpshield/xdpshield/study/report"
	"github.com/xdpshield/xdpshield/study/results"
)

func init() {
	commands["study"] = command{
		summary: "measure what the hook costs and where it pays, against nftables, in throwaway namespaces (root)",
		run:     runStudy,
	}
	commands["study-l7"] = command{
		summary: "(internal) the study's Go proxy, started by shieldlab study in its L7 namespace",
		run: func(ctx context.Context, args []string) error {
			return study.ServeL7(ctx, os.Stdin, os.Stdout)
		},
	}
	commands["study-edge"] = command{
		summary: "(internal) the study's edge server, started by shieldlab study in its namespace",
		run: func(ctx context.Context, args []string) error {
			return proc.ServeEdge(ctx, os.Stdin, os.Stdout)
		},
	}
}

func runStudy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("study", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "a short run for CI: checks every configuration produced numbers, concludes nothing")
	out := fs.String("out", "out/study", "directory for report.md, results.json and the plots")
	runs := fs.Int("runs", 0, "repetitions of every measurement (default 5; -quick 1)")
	phase := fs.Duration("phase", 0, "length of each legitimate-traffic phase (default 4s; -quick 1s)")
	dropPhase := fs.Duration("drop-phase", 0, "length of each drop-capacity measurement (default 3s; -quick 1s)")
	rate := fs.Uint64("storm-rate", 0, "frames/s of the storm the legitimate client meets (default 500000)")
	bench := fs.Bool("bench", true, "run the simulator's benchmarks (go test -bench ./shield/datapath, from the source tree)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	docs := fs.String("docs", "", "also publish the report as DIR/study.md with its plots in DIR/study/ (make study: docs)")
	only := fs.String("only", "", "run only these sections, comma-separated: "+strings.Join(results.Sections, ", ")+" (default: every one)")
	render := fs.Bool("render", false, "measure nothing: draw the report and plots of the study in -out again (and -docs)")
	if err := fs.Parse(args); err != nil {
		return helpOK(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("study: unexpected arguments %q", fs.Args())
	}
	if *render {
		res, err := results.Load(*out)
		if err != nil {
			return fmt.Errorf("study -render: %w", err)
		}
		if err := report.Write(*out, res); err != nil {
			return err
		}
		if *docs != "" {
			return report.WriteDocs(*docs, *out, res)
		}
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("study: needs root (namespaces, XDP, nftables)")
	}
	opt := study.DefaultOptions()
	if *quick {
		opt = study.QuickOptions()
	}
	if *runs > 0 {
		opt.Runs = *runs
	}
	if *phase > 0 {
		opt.Phase = *phase
	}
	if *dropPhase > 0 {
		opt.DropPhase = *dropPhase
	}
	if *rate > 0 {
		opt.StormRate = *rate
	}
	opt.Bench = *bench
	if *only != "" {
		opt.Only = strings.Split(*only, ",")
	}
	opt.Out = *out
	opt.Command = "shieldlab study " + strings.Join(args, " ")
	if !*quiet {
		opt.Progress = os.Stderr
		_, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS)
		opt.Lines = err != nil
	}
	res, err := study.Run(ctx, opt)
	if res != nil {
		fmt.Fprintf(stdout, "study written to %s (report.md, results.json, plots)\n", filepath.Clean(*out))
		if *docs != "" && err == nil {
			if err := report.WriteDocs(*docs, *out, res); err != nil {
				return fmt.Errorf("study: publish to %s: %w", *docs, err)
			}
			fmt.Fprintf(stdout, "published to %s\n", filepath.Join(*docs, "study.md"))
		}
		if missing := res.Missing(); len(missing) > 0 {
			return errors.Join(err, fmt.Errorf("study: configurations without numbers:\n  %s", strings.Join(missing, "\n  ")))
		}
	}
	return err
}
