package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/e2e"
)

func init() {
	commands["storm"] = command{
		summary: "raise a storm against the shield in throwaway namespaces (root)",
		run:     runStorm,
	}
}

// errAssertions makes the exit code non-zero when an assertion failed.
var errAssertions = errors.New("storm: assertions failed")

func runStorm(ctx context.Context, args []string) error {
	cfg := e2e.DefaultConfig()
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	fs.StringVar(&cfg.Sources, "sources", cfg.Sources, "storms to raise: few, many or both")
	fs.DurationVar(&cfg.PhaseDuration, "duration", cfg.PhaseDuration, "length of each phase")
	fs.Uint64Var(&cfg.Rate, "rate", cfg.Rate, "generator frames per second (0: full speed)")
	jsonPath := fs.String("json", "", "write the result as JSON to this file")
	fs.StringVar(&cfg.Generator, "generator", cfg.Generator, "auto, xdp (live frames, 5.18+) or af_packet")
	fs.Float64Var(&cfg.Budget.P99Ratio, "p99-ratio", cfg.Budget.P99Ratio, "p99 budget as a multiple of the baseline p99")
	fs.DurationVar(&cfg.Budget.P99Floor, "p99-floor", cfg.Budget.P99Floor, "least baseline p99 the ratio applies to (new connections)")
	fs.DurationVar(&cfg.Budget.P99FloorKeep, "p99-floor-keepalive", cfg.Budget.P99FloorKeep, "least baseline p99 the ratio applies to (kept-alive connections)")
	fs.DurationVar(&cfg.Budget.P99Cap, "p99-cap", cfg.Budget.P99Cap, "absolute p99 cap under storm (0: none, the ratio alone)")
	fs.Float64Var(&cfg.Budget.MinSuccess, "min-success", cfg.Budget.MinSuccess, "least share of legitimate requests that succeed")
	many := fs.Uint("many", uint(cfg.ManySources), "forged IPv6 sources in the many storm (IPv4 uses up to 65536)")
	few := fs.Uint("few", uint(cfg.FewSources), "sources per family in the few storm (1-16)")
	table := fs.Uint("table", uint(cfg.TableSize), "capacity of the shield's sources table")
	fs.BoolVar(&cfg.Contrast, "contrast", cfg.Contrast, "also run the storms with no program attached: they must break the budget")
	fs.BoolVar(&cfg.Limits.DryRun, "dry-run", false, "run the storms against a shield in dry-run (counting, passing everything): its budget assertions must fail")
	short := fs.Bool("short", false, "the VM matrix's scaled-down storm (e2e.ShortConfig): 3 s phases, 10k frames/s, tight limits; other flags apply on top")
	fs.Float64Var(&cfg.UDPCapacity, "udp-capacity", cfg.UDPCapacity, "requests/s the edge's datagram service answers")
	quiet := fs.Bool("quiet", false, "no live progress line")
	progressJSON := fs.Bool("progress-json", false, "progress as JSON lines on stdout (the workbench reads them), every half second; the table goes to stderr")
	if err := fs.Parse(args); err != nil {
		return helpOK(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("storm: unexpected arguments %q", fs.Args())
	}
	if *short {
		// The short storm, with every flag given on the command line
		// applied over it (the flags write into cfg).
		given := map[string]string{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
		cfg = e2e.ShortConfig()
		*many, *few, *table = uint(cfg.ManySources), uint(cfg.FewSources), uint(cfg.TableSize)
		for name, v := range given {
			fs.Set(name, v)
		}
	}
	// Checked before narrowing: -table 4294967296 must be refused, not
	// wrap to 0.
	for _, f := range []struct {
		name string
		v    uint
		to   *uint32
	}{{"many", *many, &cfg.ManySources}, {"few", *few, &cfg.FewSources}, {"table", *table, &cfg.TableSize}} {
		if f.v > math.MaxUint32 {
			return fmt.Errorf("storm: -%s %d out of range", f.name, f.v)
		}
		*f.to = uint32(f.v)
	}
	if os.Geteuid() != 0 {
		return errors.New("storm: needs root (namespaces, XDP)")
	}
	_, terr := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS)
	tty := terr == nil
	last := ""
	out := os.Stdout
	if *progressJSON {
		out, tty = os.Stderr, false
		var mu sync.Mutex
		cfg.Progress = func(p e2e.Progress) {
			mu.Lock()
			defer mu.Unlock()
			os.Stdout.Write(append(e2e.ProgressJSON(p), '\n'))
		}
	} else if !*quiet {
		cfg.Progress = func(p e2e.Progress) {
			line := e2e.ProgressLine(p)
			if tty {
				fmt.Fprintf(os.Stderr, "\r\033[K%s", line)
				last = p.Phase
				return
			}
			// Not a terminal: one line a second is plenty.
			if int(p.Elapsed.Seconds()*2)%2 == 0 || p.Phase != last {
				fmt.Fprintln(os.Stderr, line)
				last = p.Phase
			}
		}
	}
	res, err := e2e.Run(ctx, cfg)
	if tty && !*quiet && !*progressJSON {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if res != nil {
		e2e.PrintTable(out, res)
		if *jsonPath != "" {
			if jerr := e2e.WriteJSON(*jsonPath, res); jerr != nil {
				err = errors.Join(err, jerr)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("%w:\n  %s", errAssertions, strings.Join(res.Failed, "\n  "))
	}
	return nil
}
