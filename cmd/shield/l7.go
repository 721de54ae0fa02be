package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"xdpshield/shield/api"
)

func init() {
	commands["l7"] = command{"show the L7 proxy: fast path, routes and rules with their counts (API)", runL7}
}

// runL7: `shield l7 [-json]` reads GET /v1/l7.
func runL7(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("l7", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return helpOK(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("l7: unexpected arguments %q", fs.Args())
	}
	cl, err := cf.client(false)
	if err != nil {
		return err
	}
	r, err := cl.L7(ctx)
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(r)
	}
	printL7(r)
	return nil
}

func printL7(r api.L7Response) {
	fp := "on, the policy in the kernel"
	switch {
	case !r.FastPath.Attached:
		fp = "off, the Go proxy alone: " + r.FastPath.Why
	case !r.FastPath.KernelPolicy:
		fp = "attached, every request to the proxy: " + r.FastPath.Why
	}
	fmt.Fprintf(stdout, "l7 proxy on %s; fast path %s\n", r.Listen, fp)
	if r.HashHeader != "" || r.SetHeader != "" {
		fmt.Fprintf(stdout, "hash header %q, set header %q\n", r.HashHeader, r.SetHeader)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tHOST\tPREFIX\tBACKENDS\tFAST\tSLOW\t2XX\t3XX\t4XX\t5XX")
	for _, rt := range r.Routes {
		host := rt.Host
		if host == "" {
			host = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", rt.Name, host, rt.PathPrefix, strings.Join(rt.Backends, ", "),
			rt.Fast, rt.Slow, rt.Codes["2xx"], rt.Codes["3xx"], rt.Codes["4xx"], rt.Codes["5xx"])
	}
	tw.Flush()
	if len(r.RBAC) > 0 {
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RULE\tACTION\tMATCHES\tDENIED")
		for _, ru := range r.RBAC {
			var m []string
			if len(ru.Methods) > 0 {
				m = append(m, "methods "+strings.Join(ru.Methods, ","))
			}
			if ru.PathPrefix != "" {
				m = append(m, "path "+ru.PathPrefix+"*")
			}
			if ru.Source != "" {
				m = append(m, "source "+ru.Source)
			}
			if ru.Header != "" {
				m = append(m, fmt.Sprintf("%s: %s", ru.Header, ru.Value))
			}
			if len(m) == 0 {
				m = append(m, "any")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", ru.Name, ru.Action, strings.Join(m, "; "), ru.Denied)
		}
		tw.Flush()
	}
	fmt.Fprintf(stdout, "(%d requests matched no route", r.NoRoute)
	if len(r.FastPath.Messages) > 0 {
		keys := make([]string, 0, len(r.FastPath.Messages))
		for k := range r.FastPath.Messages {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			if v := r.FastPath.Messages[k]; v > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, v))
			}
		}
		fmt.Fprintf(stdout, "; kernel: %s", strings.Join(parts, ", "))
	}
	fmt.Fprintln(stdout, ")")
}
