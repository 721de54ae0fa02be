package main

import (
	"context"
	"flag"
	"fmt"

	"xdpshield/shield"
)

func init() {
	commands["limits"] = command{"limits get | limits set [-rate N] [-burst N] [-admission-rate N] [-admission-burst N] [-dry-run=BOOL] (API)", runLimits}
}

func runLimits(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "get" && args[0] != "set") {
		return fmt.Errorf("limits: want `limits get` or `limits set -rate N ...`")
	}
	sub := args[0]
	fs := flag.NewFlagSet("limits "+sub, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	rate := fs.Uint64("rate", 0, "packets per second per source")
	burst := fs.Uint64("burst", 0, "packets a source may send at once")
	arate := fs.Uint64("admission-rate", 0, "new sources admitted per second")
	aburst := fs.Uint64("admission-burst", 0, "new sources admitted at once")
	dry := fs.Bool("dry-run", false, "count would-be drops and pass them")
	if err := fs.Parse(args[1:]); err != nil {
		return helpOK(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("limits %s: unexpected arguments %q", sub, fs.Args())
	}
	cl, err := cf.client(sub == "set")
	if err != nil {
		return err
	}
	cur, err := cl.Limits(ctx)
	if err != nil {
		return err
	}
	if sub == "get" {
		if cf.json {
			return printJSON(cur)
		}
		printLimits("", cur)
		return nil
	}
	next := cur
	changed := 0
	fs.Visit(func(f *flag.Flag) {
		changed++
		switch f.Name {
		case "rate":
			next.Rate = *rate
		case "burst":
			next.Burst = *burst
		case "admission-rate":
			next.AdmissionRate = *arate
		case "admission-burst":
			next.AdmissionBurst = *aburst
		case "dry-run":
			next.DryRun = *dry
		default:
			changed--
		}
	})
	if changed == 0 {
		return fmt.Errorf("limits set: nothing to change (give -rate, -burst, -admission-rate, -admission-burst or -dry-run)")
	}
	ch, err := cl.SetLimits(ctx, next)
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(ch)
	}
	printLimits("old ", ch.Old)
	printLimits("new ", ch.New)
	return nil
}

func printLimits(prefix string, l shield.Limits) {
	fmt.Fprintf(stdout, "%srate %d/s burst %d, admission %d/s burst %d, dry-run %v\n",
		prefix, l.Rate, l.Burst, l.AdmissionRate, l.AdmissionBurst, l.DryRun)
}
