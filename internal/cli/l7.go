package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/BurntSushi/toml"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// runL7: `shield l7 [-json]` reads GET /v1/l7; `shield l7 get` and `shield
// l7 set -f FILE` read and replace the policy (/v1/l7/policy).
func runL7(ctx context.Context, e *Env, args []string) error {
	if len(args) > 0 && (args[0] == "get" || args[0] == "set") {
		return runL7Policy(ctx, e, args[0], args[1:])
	}
	fs := flag.NewFlagSet("l7", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	if err := e.Parse(fs, args); err != nil {
		return HelpOK(err)
	}
	if fs.NArg() > 0 {
		return Usagef("l7: unexpected arguments %q", fs.Args())
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
		return e.PrintJSON(r)
	}
	printL7(e.Stdout, r)
	return nil
}

func printL7(w io.Writer, r api.L7Response) {
	fp := "on, the policy in the kernel"
	switch {
	case !r.FastPath.Attached:
		fp = "off, the Go proxy alone: " + r.FastPath.Why
	case !r.FastPath.KernelPolicy:
		fp = "attached, every request to the proxy: " + r.FastPath.Why
	}
	fmt.Fprintf(w, "l7 proxy on %s; fast path %s\n", r.Listen, fp)
	if r.HashHeader != "" || r.SetHeader != "" {
		fmt.Fprintf(w, "hash header %q, set header %q\n", r.HashHeader, r.SetHeader)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
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
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
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
	fmt.Fprintf(w, "(%d requests matched no route", r.NoRoute)
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
		fmt.Fprintf(w, "; kernel: %s", strings.Join(parts, ", "))
	}
	if n := r.FastPath.Unjoined; n > 0 {
		fmt.Fprintf(w, "; %d connections the kernel could not take, served by the proxy alone", n)
	}
	fmt.Fprintln(w, ")")
}

// l7File is a policy file: the [l7] section of serve's configuration
// without what only a restart changes (listen, fast_path).
type l7File struct {
	L7 policy.Section `toml:"l7"`
}

// readL7Policy reads a policy file strictly: unknown keys, listen and
// fast_path are errors, and the policy is validated whole before it is
// sent (the service validates it again).
func readL7Policy(path string) (policy.Config, error) {
	var f l7File
	md, err := toml.DecodeFile(path, &f)
	if err != nil {
		return policy.Config{}, fmt.Errorf("policy %s: %w", path, err)
	}
	var errs []error
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		errs = append(errs, fmt.Errorf("unknown keys: %s (want an [l7] section)", strings.Join(keys, ", ")))
	}
	if f.L7.Listen != "" || f.L7.FastPath != "" {
		errs = append(errs, errors.New("l7.listen and l7.fast_path change only with a restart of serve: leave them out"))
	}
	if len(errs) == 0 {
		errs = append(errs, f.L7.Config.Validate())
	}
	if err := errors.Join(errs...); err != nil {
		return policy.Config{}, fmt.Errorf("policy %s: %w", path, err)
	}
	return f.L7.Config, nil
}

func runL7Policy(ctx context.Context, e *Env, sub string, args []string) error {
	fs := flag.NewFlagSet("l7 "+sub, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	file := fs.String("f", "", "policy file: an [l7] section ([[l7.route]], [[l7.rbac]], hash_header, [l7.set_header]) (set)")
	if err := e.Parse(fs, args); err != nil {
		return HelpOK(err)
	}
	if fs.NArg() > 0 {
		return Usagef("l7 %s: unexpected arguments %q", sub, fs.Args())
	}
	if sub == "set" && *file == "" {
		return Usagef("l7 set: want -f FILE")
	}
	if sub == "get" && *file != "" {
		return errors.New("l7 get: -f is for l7 set")
	}
	var c policy.Config
	if sub == "set" {
		var err error
		if c, err = readL7Policy(*file); err != nil {
			return err
		}
	}
	cl, err := cf.client(sub == "set")
	if err != nil {
		return err
	}
	if sub == "get" {
		p, err := cl.L7Policy(ctx)
		if err != nil {
			return err
		}
		if cf.json {
			return e.PrintJSON(p)
		}
		return toml.NewEncoder(e.Stdout).Encode(struct {
			L7 policy.Config `toml:"l7"`
		}{p})
	}
	ch, err := cl.SetL7Policy(ctx, c)
	if err != nil {
		return err
	}
	if cf.json {
		return e.PrintJSON(ch)
	}
	fmt.Fprintf(e.Stdout, "l7 policy generation %d: %d routes, %d rules (was %d routes, %d rules); not kept across a restart of serve, which reads its configuration file\n",
		ch.Generation, len(ch.New.Routes), len(ch.New.RBAC), len(ch.Old.Routes), len(ch.Old.RBAC))
	return nil
}
