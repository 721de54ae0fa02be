package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/shield"
)

// LBPins are the balancer's pin subdirectories, removed by detach.
var LBPins = []shield.Companion{{Name: lb.PinSubdir, Remove: lb.RemovePins}, {Name: lb.StagingSubdir, Remove: lb.RemovePins}}

func runDetach(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("detach", flag.ContinueOnError)
	iface := fs.String("iface", "", "interface to unprotect")
	pinRoot := fs.String("pin-root", shield.DefaultPinRoot, "bpffs directory of the pins")
	lbOnly := fs.Bool("lb-only", false, "remove only the socket balancer's pins (lb/), keeping the shield attached")
	if err := e.Parse(fs, args); err != nil {
		return cli.HelpOK(err)
	}
	if *iface == "" {
		return cli.Usagef("detach: -iface is required")
	}
	detach, what := shield.Detach, "detached; program and pins removed"
	if *lbOnly {
		detach, what = shield.DetachCompanions, "balancer detached; its pins removed, the shield stays"
	}
	if err := detach(*pinRoot, *iface, LBPins...); err != nil {
		if errors.Is(err, shield.ErrLocked) {
			return fmt.Errorf("shield serve is running on %s; stop it first: %w", *iface, err)
		}
		return err
	}
	dir, _ := shield.PinDir(*pinRoot, *iface)
	slog.New(slog.NewTextHandler(os.Stderr, nil)).Info(what,
		keyIface, *iface, keyPinDir, dir)
	return nil
}
