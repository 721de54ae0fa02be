package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/BurntSushi/toml"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/xdplb"
)

const xdplbUsage = "xdplb: want `xdplb list` or `xdplb apply FILE` (FILE: the [xdplb] section's keys, at top level)"

// runXDPLB: `shield xdplb list` reads GET /v1/xdplb; `shield xdplb apply
// FILE` validates FILE and replaces the whole configuration (PUT).
func runXDPLB(ctx context.Context, e *Env, args []string) error {
	if e.SubHelp(args, xdplbUsage+" (`shield xdplb SUB -h` shows its flags)") {
		return nil
	}
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	if sub != "list" && sub != "apply" {
		return Usagef(xdplbUsage)
	}
	fs := flag.NewFlagSet("xdplb "+sub, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	if err := e.Parse(fs, args); err != nil {
		return HelpOK(err)
	}
	var cfg xdplb.Config
	if sub == "apply" {
		if fs.NArg() != 1 {
			return Usagef("xdplb apply: want one FILE")
		}
		md, err := toml.DecodeFile(fs.Arg(0), &cfg)
		if err != nil {
			return fmt.Errorf("read %s: %w", fs.Arg(0), err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return fmt.Errorf("%s: unknown keys %v", fs.Arg(0), und)
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(0), err)
		}
	} else if fs.NArg() > 0 {
		return Usagef("xdplb list takes no arguments")
	}
	cl, err := cf.client(sub == "apply")
	if err != nil {
		return err
	}
	var r api.XDPLBResponse
	if sub == "apply" {
		r, err = cl.XDPLBPut(ctx, cfg)
	} else {
		r, err = cl.XDPLB(ctx)
	}
	if err != nil {
		return err
	}
	if cf.json {
		return e.PrintJSON(r)
	}
	printXDPLB(e.Stdout, r)
	return nil
}

func printXDPLB(w io.Writer, r api.XDPLBResponse) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VIP\tBACKENDS\tPACKETS\tBYTES")
	for _, v := range r.Config.VIPs {
		var bs []string
		for _, b := range v.Backends {
			s := b.Addr.String()
			if b.Drain {
				s += " (draining)"
			} else if b.Weight > 1 {
				s += fmt.Sprintf(" (weight %d)", b.Weight)
			}
			bs = append(bs, s)
		}
		c := r.Stats.VIPs[v.String()]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", v, strings.Join(bs, ", "), c.Packets, c.Bytes)
	}
	tw.Flush()
	var rs []string
	for _, name := range slices.Sorted(maps.Keys(r.Stats.Reasons)) {
		rs = append(rs, fmt.Sprintf("%s %d", name, r.Stats.Reasons[name]))
	}
	fmt.Fprintf(w, "(next hop %s; %s)\n", r.Config.NextHop, strings.Join(rs, ", "))
}
