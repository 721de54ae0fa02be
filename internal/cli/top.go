package cli

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/xdpshield/xdpshield/shield/source"
)

func runTop(ctx context.Context, e *Env, args []string) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	n := fs.Int("n", 10, fmt.Sprintf("how many sources (1-%d)", source.MaxTop))
	byName := fs.String("by", "dropped", "rank by dropped or passed")
	if err := e.Parse(fs, args); err != nil {
		return HelpOK(err)
	}
	if fs.NArg() > 0 {
		return Usagef("top: unexpected arguments %q", fs.Args())
	}
	by, err := source.ParseTopOrder(*byName)
	if err != nil {
		return err
	}
	cl, err := cf.client(false)
	if err != nil {
		return err
	}
	r, err := cl.Top(ctx, *n, by)
	if err != nil {
		return err
	}
	if cf.json {
		return e.PrintJSON(r)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSOURCE\tPASSED\tDROPPED\tLIMITED")
	for i, s := range r.Sources {
		lim := ""
		if s.Limited {
			lim = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\n", i+1, sourceName(s), s.Passed, s.Dropped, lim)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "(%d sources scanned in %.0f ms, by %s)\n", r.Scanned, r.ElapsedMs, r.By)
	return nil
}

// sourceName writes a source as the table keys it: an IPv4 address bare
// (a /32), anything wider as its prefix (an IPv6 /64).
func sourceName(s source.Source) string {
	if s.Prefix.IsValid() && s.Prefix.Bits() < s.Prefix.Addr().BitLen() {
		return s.Prefix.String()
	}
	return s.Addr.String()
}
