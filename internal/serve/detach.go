package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/lb/lbpin"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// LBPins are the balancer's pin subdirectories, removed by detach.
var LBPins = []pin.Companion{{Name: lbpin.Subdir, Remove: lbpin.Remove}, {Name: lbpin.StagingSubdir, Remove: lbpin.Remove}}

func runDetach(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("detach", flag.ContinueOnError)
	iface := fs.String("iface", "", "interface to unprotect")
	pinRoot := fs.String("pin-root", pin.DefaultPinRoot, "bpffs directory of the pins")
	lbOnly := fs.Bool("lb-only", false, "remove only the socket balancer's pins (lb/), keeping the shield attached")
	if err := e.Parse(fs, args); err != nil {
		return cli.HelpOK(err)
	}
	if *iface == "" {
		return cli.Usagef("detach: -iface is required")
	}
	detach, what := pin.Detach, "detached; program and pins removed"
	if *lbOnly {
		detach, what = pin.DetachCompanions, "balancer detached; its pins removed, the shield stays"
	}
	if err := detach(*pinRoot, *iface, LBPins...); err != nil {
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
