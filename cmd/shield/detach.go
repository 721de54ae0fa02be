package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"xdpshield/shield"
)

func init() {
	commands["detach"] = command{"remove the shield from an interface, with its pins (stop serve first)", runDetach}
}

func runDetach(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("detach", flag.ContinueOnError)
	iface := fs.String("iface", "", "interface to unprotect")
	pinRoot := fs.String("pin-root", shield.DefaultPinRoot, "bpffs directory of the pins")
	if err := fs.Parse(args); err != nil {
		return helpOK(err)
	}
	if *iface == "" {
		return errors.New("detach: -iface is required")
	}
	if err := shield.Detach(*pinRoot, *iface); err != nil {
		if errors.Is(err, shield.ErrLocked) {
			return fmt.Errorf("shield serve is running on %s; stop it first: %w", *iface, err)
		}
		return err
	}
	dir, _ := shield.PinDir(*pinRoot, *iface)
	slog.New(slog.NewTextHandler(os.Stderr, nil)).Info("detached; program and pins removed",
		keyIface, *iface, keyPinDir, dir)
	return nil
}
