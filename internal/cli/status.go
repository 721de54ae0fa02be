package cli

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// statusReport is what `shield status -json` prints.
type statusReport struct {
	Info     api.Info             `json:"info"`
	Counters api.CountersResponse `json:"counters"`
	Limits   config.Limits        `json:"limits"`
	Allow    int                  `json:"allow_prefixes"`
	Deny     int                  `json:"deny_prefixes"`
}

func runStatus(ctx context.Context, e *Env, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	if err := e.Parse(fs, args); err != nil {
		return HelpOK(err)
	}
	if fs.NArg() > 0 {
		return Usagef("status: unexpected arguments %q", fs.Args())
	}
	cl, err := cf.client(false)
	if err != nil {
		return err
	}
	var r statusReport
	if r.Info, err = cl.Info(ctx); err != nil {
		return err
	}
	if r.Counters, err = cl.Counters(ctx); err != nil {
		return err
	}
	if r.Limits, err = cl.Limits(ctx); err != nil {
		return err
	}
	al, err := cl.List(ctx, lists.AllowList)
	if err != nil {
		return err
	}
	dl, err := cl.List(ctx, lists.DenyList)
	if err != nil {
		return err
	}
	r.Allow, r.Deny = len(al.Prefixes), len(dl.Prefixes)
	if cf.json {
		return e.PrintJSON(r)
	}
	c := r.Counters
	if in := r.Info; in.Iface != "" {
		how := "attached"
		if in.Adopted {
			how = "adopted"
		}
		fmt.Fprintf(e.Stdout, "shield   %s on %s (%s XDP), link %d, program %d, %s, up %s\n", in.Version, in.Iface, in.Mode,
			in.LinkID, in.ProgramID, how, time.Duration(in.UptimeSeconds*float64(time.Second)).Round(time.Second))
		if !in.Healthy {
			fmt.Fprintf(e.Stdout, "NOT PROTECTING: %s\n", in.Problem)
		}
	}
	fmt.Fprintf(e.Stdout, "sources  %d tracked of %d (%.1f%%)\n", c.Sources.Tracked, c.Sources.Capacity,
		100*float64(c.Sources.Tracked)/float64(max(c.Sources.Capacity, 1)))
	printLimits(e.Stdout, "limits   ", r.Limits)
	fmt.Fprintf(e.Stdout, "lists    allow %d prefixes, deny %d prefixes\n", r.Allow, r.Deny)
	fmt.Fprintf(e.Stdout, "packets  passed %d, dropped %d\n\n", c.Verdicts["pass"], c.Verdicts["drop"])
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VERDICT\tREASON\tTCP\tUDP\tICMP\tOTHER\t")
	type row struct{ v, r string }
	var rows []row
	vals := map[row]map[string]uint64{}
	for _, p := range c.Packets {
		k := row{p.Verdict, p.Reason}
		if vals[k] == nil {
			vals[k] = map[string]uint64{}
			rows = append(rows, k)
		}
		vals[k][p.Proto] = p.Packets
	}
	for _, k := range rows {
		v := vals[k]
		if v["tcp"]+v["udp"]+v["icmp"]+v["other"] == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t\n", k.v, k.r, v["tcp"], v["udp"], v["icmp"], v["other"])
	}
	return tw.Flush()
}
