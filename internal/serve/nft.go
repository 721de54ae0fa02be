package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/nft"
	shieldcfg "github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/ownaddr"
)

func runNft(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("nft", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "configuration file, as for serve (TOML; see docs/shield.example.toml)")
	iface := fs.String("iface", "", "interface to protect (overrides the file)")
	tableSize := fs.Uint("table-size", 0, "capacity of each per-source set (overrides table_size)")
	apply := fs.Bool("apply", false, "load the ruleset with nft in this network namespace instead of printing it")
	check := fs.Bool("check", false, "have nft check the ruleset (nft -c) and print it")
	del := fs.Bool("delete", false, "remove the table from this network namespace and exit")
	table := fs.String("table", nft.DefaultTable, "name of the netdev table")
	timeout := fs.Duration("timeout", time.Minute, "how long an idle source stays in its set")
	if err := e.Parse(fs, args); err != nil {
		return cli.HelpOK(err)
	}
	if fs.NArg() > 0 {
		return cli.Usagef("nft: unexpected arguments %q", fs.Args())
	}
	if *del {
		return nft.Delete(ctx, nil, *table)
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "iface":
			cfg.Iface = *iface
		case "table-size":
			cfg.TableSize = uint64(*tableSize)
		}
	})
	set, err := cfg.validate()
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	if cfg.TableSize > math.MaxUint32 {
		return errors.New("nft: table_size too large")
	}
	// Return traffic comes back to this namespace's ephemeral ports, as
	// for serve.
	eph, err := shieldcfg.LocalPortRange()
	if err != nil {
		return err
	}
	nc := nft.Config{Table: *table, Ifaces: []string{cfg.Iface}, TableSize: uint32(cfg.TableSize),
		Allow: set.allow, Deny: set.deny, Timeout: *timeout, Ephemeral: eph}.WithLimits(set.limits)
	if cfg.Lists.OwnAddressesSpoofed {
		own, err := ownaddr.List(nil)
		if err != nil {
			return err
		}
		nc.Own = nft.Hosts(own)
	}
	rs, err := nft.Render(nc)
	if err != nil {
		return err
	}
	switch {
	case *apply:
		if err := nft.Apply(ctx, nil, rs); err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "applied: table netdev %s on %s (`nft list table netdev %s` shows it, `shield nft -delete` removes it)\n", *table, cfg.Iface, *table)
		return nil
	case *check:
		if err := nft.Check(ctx, nil, rs); err != nil {
			return err
		}
	}
	fmt.Fprint(e.Stdout, rs)
	return nil
}
