package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/xdpshield/xdpshield/api"
)

const lbUsage = "lb: want `lb list`, `lb add|drain|remove PROTO/VIP:PORT ADDR:PORT...`, " +
	"`lb create|replace [-mode M] [-source-range P]... [-affinity D] [-drain ADDR:PORT]... PROTO/VIP:PORT ADDR:PORT[@W]...`, " +
	"`lb delete PROTO/VIP:PORT` or `lb mode PROTO/VIP:PORT random|maglev`"

// strings is a repeatable string flag.
type stringsFlag []string

func (f *stringsFlag) String() string     { return strings.Join(*f, ",") }
func (f *stringsFlag) Set(v string) error { *f = append(*f, v); return nil }

// runLB: `shield lb list`, `shield lb add tcp/198.18.0.100:80 198.18.0.13:8080`.
func runLB(ctx context.Context, e *Env, args []string) error {
	if e.SubHelp(args, lbUsage+" (`shield lb SUB -h` shows its flags; lb list shows the list)") {
		return nil
	}
	subs := map[string]bool{"list": true, "add": true, "drain": true, "remove": true, "create": true, "replace": true, "delete": true, "mode": true}
	if len(args) == 0 || !subs[args[0]] {
		return Usagef("%s", lbUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("lb "+sub, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	var spec api.LBServiceSpec
	var ranges, drain stringsFlag
	if sub == "create" || sub == "replace" {
		fs.StringVar(&spec.Mode, "mode", "random", "random or maglev")
		fs.Var(&ranges, "source-range", "a client prefix admitted (repeatable; none: every client)")
		fs.StringVar(&spec.AffinityTimeout, "affinity", "", "session affinity's idle timeout (10m); empty: off")
		if sub == "replace" {
			fs.Var(&drain, "drain", "a backend that drains (repeatable)")
		}
	}
	if err := e.Parse(fs, args[1:]); err != nil {
		return HelpOK(err)
	}
	switch sub {
	case "delete":
		if fs.NArg() != 1 {
			return Usagef("lb delete: want PROTO/VIP:PORT")
		}
	case "mode":
		if fs.NArg() != 2 {
			return Usagef("lb mode: want PROTO/VIP:PORT and random or maglev")
		}
	case "list":
	default:
		if fs.NArg() < 2 {
			return Usagef("lb %s: want PROTO/VIP:PORT and at least one ADDR:PORT", sub)
		}
	}
	cl, err := cf.client(sub != "list")
	if err != nil {
		return err
	}
	if sub == "list" {
		if fs.NArg() > 0 {
			return Usagef("lb list takes no arguments")
		}
		r, err := cl.LB(ctx)
		if err != nil {
			return err
		}
		if cf.json {
			return e.PrintJSON(r)
		}
		printLB(e.Stdout, r)
		return nil
	}
	var s api.LBService
	switch sub {
	case "create", "replace":
		spec.Service, spec.Backends, spec.SourceRanges, spec.Draining = fs.Arg(0), fs.Args()[1:], ranges, drain
		s, err = cl.LBService(ctx, sub, spec)
	case "delete":
		if err := cl.LBDelete(ctx, fs.Arg(0)); err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "deleted %s\n", fs.Arg(0))
		return nil
	case "mode":
		s, err = cl.LBMode(ctx, fs.Arg(0), fs.Arg(1))
	default:
		s, err = cl.LBChange(ctx, sub, fs.Arg(0), fs.Args()[1:])
	}
	if err != nil {
		return err
	}
	if cf.json {
		return e.PrintJSON(s)
	}
	printLB(e.Stdout, api.LBResponse{Services: []api.LBService{s}})
	return nil
}

func printLB(w io.Writer, r api.LBResponse) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tMODE\tBACKENDS\tSOURCE RANGES\tTRANSLATED\tNO BACKEND\tDENIED")
	for _, s := range r.Services {
		var bs []string
		for _, b := range s.Backends {
			a := b.Addr
			if b.Weight > 1 {
				a += fmt.Sprintf("@%d", b.Weight)
			}
			if b.State != "active" {
				a += " (" + b.State + ")"
			}
			bs = append(bs, a)
		}
		ranges := "any"
		if len(s.SourceRanges) > 0 {
			ranges = strings.Join(s.SourceRanges, ", ")
		}
		mode := s.Mode
		if s.AffinityTimeout != "" {
			mode += " (affinity " + s.AffinityTimeout + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", s.Service, mode, strings.Join(bs, ", "), ranges, s.Translated, s.NoBackend, s.Denied)
	}
	tw.Flush()
	switch {
	case r.StateMode == "sk_storage":
		fmt.Fprintf(w, "(%d calls to no service; %d sockets hold state, on the sockets; %d evicted, %d missed)\n",
			r.NotService, r.ReverseEntries, r.StateEvicted, r.StateMissed)
	case r.ReverseCapacity > 0:
		fmt.Fprintf(w, "(%d calls to no service; %d sockets hold state, of %d in the lru; %d evicted, %d missed)\n",
			r.NotService, r.ReverseEntries, r.ReverseCapacity, r.StateEvicted, r.StateMissed)
	}
}
