package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"
)

// healthTimeout bounds the request: a health check that hangs is a
// failed one.
const healthTimeout = 5 * time.Second

func runHealth(ctx context.Context, e *Env, args []string) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	if err := e.Parse(fs, args); err != nil {
		return HelpOK(err)
	}
	if fs.NArg() > 0 {
		return Usagef("health: unexpected arguments %q", fs.Args())
	}
	cl, err := cf.client(false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	h, err := cl.Health(ctx)
	if err != nil {
		return fmt.Errorf("unhealthy: %w", err)
	}
	if cf.json {
		if err := e.PrintJSON(h); err != nil {
			return err
		}
	}
	if !h.Healthy {
		return errors.New("unhealthy: NOT PROTECTING: " + h.Problem)
	}
	if !cf.json {
		fmt.Fprintln(e.Stdout, "healthy: protecting the interface")
	}
	return nil
}
