package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"
)

func init() {
	commands["health"] = command{"exit 0 while the service protects its interface, 1 when not or unreachable (API; a container's HEALTHCHECK)", runHealth}
}

// healthTimeout bounds the request: a health check that hangs is a
// failed one.
const healthTimeout = 5 * time.Second

func runHealth(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return helpOK(err)
	}
	if fs.NArg() > 0 {
		return usagef("health: unexpected arguments %q", fs.Args())
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
		if err := printJSON(h); err != nil {
			return err
		}
	}
	if !h.Healthy {
		return errors.New("unhealthy: NOT PROTECTING: " + h.Problem)
	}
	if !cf.json {
		fmt.Fprintln(stdout, "healthy: protecting the interface")
	}
	return nil
}
