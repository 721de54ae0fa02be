package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/xdpshield/xdpshield/shield/config"
)

func runLimits(ctx context.Context, e *Env, args []string) error {
	if e.SubHelp(args, "limits: want `limits get` or `limits set -rate N ...`"+" (`shield limits SUB -h` shows its flags)") {
		return nil
	}
	if len(args) == 0 || (args[0] != "get" && args[0] != "set") {
		return Usagef("limits: want `limits get` or `limits set -rate N ...`")
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
	protected := fs.String("protected", "", "comma-separated destinations held to the limits above: tcp/PORT, udp/PORT, tcp/ADDR:PORT, icmp (empty: every packet; else the rest but return traffic)")
	urate := fs.Uint64("unprotected-rate", 0, "packets per second per source of return traffic (to ephemeral ports, opening no connection)")
	uburst := fs.Uint64("unprotected-burst", 0, "packets a source may send at once of return traffic")
	uarate := fs.Uint64("unprotected-admission-rate", 0, "new sources of return traffic admitted per second")
	uaburst := fs.Uint64("unprotected-admission-burst", 0, "new sources of return traffic admitted at once")
	kp4 := fs.Uint("key-prefix4", 0, "prefix length an IPv4 source is keyed by (1-32)")
	kp6 := fs.Uint("key-prefix6", 0, "prefix length an IPv6 source is keyed by (1-128)")
	aggs := fs.String("aggregates", "", "comma-separated capacities of protected destinations, shared by every source: DEST=RATE/BURST, e.g. udp/53=10000/20000 (empty: none)")
	if err := e.Parse(fs, args[1:]); err != nil {
		return HelpOK(err)
	}
	if fs.NArg() > 0 {
		return Usagef("limits %s: unexpected arguments %q", sub, fs.Args())
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
			return e.PrintJSON(cur)
		}
		printLimits(e.Stdout, "", cur)
		return nil
	}
	next := cur
	changed := 0
	var errs []error
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
		case "protected":
			next.Protected = nil
			for _, w := range strings.FieldsFunc(*protected, func(r rune) bool { return r == ',' || r == ' ' }) {
				d, err := config.ParseDestination(w)
				if err != nil {
					errs = append(errs, fmt.Errorf("-protected: %w", err))
				}
				next.Protected = append(next.Protected, d)
			}
		case "unprotected-rate":
			next.Unprotected.Rate = *urate
		case "unprotected-burst":
			next.Unprotected.Burst = *uburst
		case "unprotected-admission-rate":
			next.Unprotected.AdmissionRate = *uarate
		case "unprotected-admission-burst":
			next.Unprotected.AdmissionBurst = *uaburst
		case "key-prefix4":
			next.KeyPrefix4 = uint8(min(*kp4, 255))
		case "key-prefix6":
			next.KeyPrefix6 = uint8(min(*kp6, 255))
		case "aggregates":
			next.Aggregates = nil
			for _, w := range strings.FieldsFunc(*aggs, func(r rune) bool { return r == ',' || r == ' ' }) {
				a, err := config.ParseAggregate(w)
				if err != nil {
					errs = append(errs, fmt.Errorf("-aggregates: %w", err))
				}
				next.Aggregates = append(next.Aggregates, a)
			}
		default:
			changed--
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if changed == 0 {
		return fmt.Errorf("limits set: nothing to change (give -rate, -burst, -admission-rate, -admission-burst, -dry-run, -protected, -unprotected-*, -key-prefix4, -key-prefix6 or -aggregates)")
	}
	ch, err := cl.SetLimits(ctx, next)
	if err != nil {
		return err
	}
	if cf.json {
		return e.PrintJSON(ch)
	}
	printLimits(e.Stdout, "old ", ch.Old)
	printLimits(e.Stdout, "new ", ch.New)
	return nil
}

func printLimits(w io.Writer, prefix string, l config.Limits) {
	prot := "every destination"
	if len(l.Protected) > 0 {
		ds := make([]string, len(l.Protected))
		for i, d := range l.Protected {
			ds[i] = d.String()
		}
		prot = strings.Join(ds, ",")
	}
	u := l.Unprotected
	agg := "none"
	if len(l.Aggregates) > 0 {
		as := make([]string, len(l.Aggregates))
		for i, a := range l.Aggregates {
			as[i] = a.String()
		}
		agg = strings.Join(as, ",")
	}
	fmt.Fprintf(w, "%srate %d/s burst %d, admission %d/s burst %d, dry-run %v; protected %s; "+
		"unprotected %d/s burst %d, admission %d/s burst %d; sources keyed by /%d and /%d; aggregates %s\n",
		prefix, l.Rate, l.Burst, l.AdmissionRate, l.AdmissionBurst, l.DryRun, prot,
		u.Rate, u.Burst, u.AdmissionRate, u.AdmissionBurst, l.KeyPrefix4, l.KeyPrefix6, agg)
}
