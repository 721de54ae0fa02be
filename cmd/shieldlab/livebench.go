package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/xdpshield/xdpshield/study"
)

func init() {
	commands["live-bench"] = command{
		summary: "the live path beside `go test -bench ./shield/datapath`: generator alone, XDP_DROP and the shield in a throwaway veth (root; make bench)",
		run:     runLiveBench,
	}
}

func runLiveBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("live-bench", flag.ContinueOnError)
	d := fs.Duration("phase", 2*time.Second, "how long each target is measured")
	if err := fs.Parse(args); err != nil {
		return helpOK(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("live-bench: unexpected arguments %q", fs.Args())
	}
	if *d <= 0 || *d > time.Minute {
		return fmt.Errorf("live-bench: -phase %v out of (0, 1m]", *d)
	}
	if os.Geteuid() != 0 {
		return errors.New("live-bench: needs root (namespaces, XDP)")
	}
	rows, err := study.LiveBench(ctx, *d)
	if len(rows) > 0 {
		study.WriteLive(stdout, rows)
	}
	return err
}
