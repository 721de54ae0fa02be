package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/xdpshield/xdpshield/api"
)

func init() {
	commands["lb"] = command{"lb list | lb add|drain|remove SERVICE BACKEND...: the socket balancer's services (API)", runLB}
}

// runLB: `shield lb list`, `shield lb add tcp/198.18.0.100:80 198.18.0.13:8080`.
func runLB(ctx context.Context, args []string) error {
	if subHelp(args, "lb: want `lb list` or `lb add|drain|remove PROTO/VIP:PORT ADDR:PORT...`"+" (`shield lb SUB -h` shows its flags)") {
		return nil
	}
	if len(args) == 0 || !map[string]bool{"list": true, "add": true, "drain": true, "remove": true}[args[0]] {
		return usagef("lb: want `lb list` or `lb add|drain|remove PROTO/VIP:PORT ADDR:PORT...`")
	}
	sub := args[0]
	fs := flag.NewFlagSet("lb "+sub, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return helpOK(err)
	}
	if sub != "list" && fs.NArg() < 2 {
		return usagef("lb %s: want PROTO/VIP:PORT and at least one ADDR:PORT", sub)
	}
	cl, err := cf.client(sub != "list")
	if err != nil {
		return err
	}
	if sub == "list" {
		if fs.NArg() > 0 {
			return usagef("lb list takes no arguments")
		}
		r, err := cl.LB(ctx)
		if err != nil {
			return err
		}
		if cf.json {
			return printJSON(r)
		}
		printLB(r)
		return nil
	}
	s, err := cl.LBChange(ctx, sub, fs.Arg(0), fs.Args()[1:])
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(s)
	}
	printLB(api.LBResponse{Services: []api.LBService{s}})
	return nil
}

func printLB(r api.LBResponse) {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
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
		fmt.Fprintf(stdout, "(%d calls to no service; %d sockets hold state, on the sockets; %d evicted, %d missed)\n",
			r.NotService, r.ReverseEntries, r.StateEvicted, r.StateMissed)
	case r.ReverseCapacity > 0:
		fmt.Fprintf(stdout, "(%d calls to no service; %d sockets hold state, of %d in the lru; %d evicted, %d missed)\n",
			r.NotService, r.ReverseEntries, r.ReverseCapacity, r.StateEvicted, r.StateMissed)
	}
}
