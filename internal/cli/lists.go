package cli

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/xdpshield/xdpshield/shield/lists"
)

func runList(ctx context.Context, e *Env, l lists.List, args []string) error {
	if e.SubHelp(args, fmt.Sprintf("%s: want `%s add|del|list` (`shield %s SUB -h` shows its flags)", l, l, l)) {
		return nil
	}
	if len(args) == 0 || (args[0] != "add" && args[0] != "del" && args[0] != "list") {
		return Usagef("%s: want `%s add|del|list`", l, l)
	}
	sub := args[0]
	fs := flag.NewFlagSet(l.String()+" "+sub, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	file := fs.String("f", "", "read CIDRs from FILE too, one per line (# comments; - is stdin)")
	if err := e.Parse(fs, args[1:]); err != nil {
		return HelpOK(err)
	}
	cidrs := fs.Args()
	if *file != "" {
		more, err := readCIDRs(*file)
		if err != nil {
			return err
		}
		cidrs = append(cidrs, more...)
	}
	if sub == "list" && len(cidrs) > 0 {
		return Usagef("%s list takes no CIDRs", l)
	}
	if sub != "list" && len(cidrs) == 0 {
		return Usagef("%s %s: give CIDRs as arguments or with -f", l, sub)
	}
	cl, err := cf.client(sub != "list")
	if err != nil {
		return err
	}
	var prefixes []string
	switch sub {
	case "list":
		r, err := cl.List(ctx, l)
		if err != nil {
			return err
		}
		if cf.json {
			return e.PrintJSON(r)
		}
		prefixes = r.Prefixes
	case "add", "del":
		call := cl.Add
		if sub == "del" {
			call = cl.Remove
		}
		r, err := call(ctx, l, cidrs)
		if err != nil {
			return err
		}
		if cf.json {
			return e.PrintJSON(r)
		}
		if sub == "add" {
			fmt.Fprintf(e.Stdout, "added %d new prefixes; the %s list holds %d\n", len(r.Added), l, len(r.Prefixes))
		} else {
			fmt.Fprintf(e.Stdout, "removed %d prefixes; the %s list holds %d\n", len(r.Removed), l, len(r.Prefixes))
		}
		return nil
	}
	for _, p := range prefixes {
		fmt.Fprintln(e.Stdout, p)
	}
	return nil
}

func readCIDRs(path string) ([]string, error) {
	f := os.Stdin
	if path != "-" {
		var err error
		if f, err = os.Open(path); err != nil {
			return nil, fmt.Errorf("read CIDRs: %w", err)
		}
		defer f.Close()
	}
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read CIDRs from %s: %w", path, err)
	}
	return out, nil
}
