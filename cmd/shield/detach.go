package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/xdpshield/xdpshield/lb/lbpin"
	"github.com/xdpshield/xdpshield/shield/pin"
)

func init() {
	commands["detach"] = command{"remove the shield and the balancer from an interface, with their pins (stop serve first)", runDetach}
}

// lbPins are the balancer's pin subdirectories, removed by detach.
var lbPins = []pin.Companion{{Name: lbpin.Subdir, Remove: lbpin.Remove}, {Name: lbpin.StagingSubdir, Remove: lbpin.Remove}}

func runDetach(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("detach", flag.ContinueOnError)
	iface := fs.String("iface", "", "interface to unprotect")
	pinRoot := fs.String("pin-root", pin.DefaultPinRoot, "bpffs directory of the pins")
	lbOnly := fs.Bool("lb-only", false, "remove only the socket balancer's pins (lb/), keeping the shield attached")
	if err := parseFlags(fs, args); err != nil {
		return helpOK(err)
	}
	if *iface == "" {
		return usagef("detach: -iface is required")
	}
	detach, what := pin.Detach, "detached; program and pins removed"
	if *lbOnly {
		detach, what = pin.DetachCompanions, "balancer detached; its pins removed, the shield stays"
	}
	if err := detach(*pinRoot, *iface, lbPins...); err != nil {
		if errors.Is(err, pin.ErrLocked) {
			return fmt.Errorf("shield serve is running on %s; stop it first: %w", *iface, err)
		}
		return err
	}
	dir, _ := pin.PinDir(*pinRoot, *iface)
	slog.New(slog.NewTextHandler(os.Stderr, nil)).Info(what,
		keyIface, *iface, keyPinDir, dir)
	return nil
}
