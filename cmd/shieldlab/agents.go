package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/xdpshield/xdpshield/e2e/parts"
)

// The container lane's agents (e2e/parts/agent.go): the edge image runs
// `shieldlab e2e-edge`, the storm image `shieldlab e2e-storm`. Hidden: the
// lane's tooling, not a command to run by hand.
func init() {
	hidden["e2e-edge"] = command{"the container lane's edge: HTTPS server and datagram service", runAgent(parts.ServeEdgeAgent)}
	hidden["e2e-storm"] = command{"the container lane's storm: generators and legitimate client", runAgent(parts.ServeStormAgent)}
}

func runAgent(serve func(context.Context, string, *slog.Logger) error) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		dir := fs.String("dir", "/run/xdps", "directory of the agent's socket")
		if err := fs.Parse(args); err != nil {
			return helpOK(err)
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments %q", fs.Args())
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		slog.SetDefault(log)
		return serve(ctx, *dir, log)
	}
}
