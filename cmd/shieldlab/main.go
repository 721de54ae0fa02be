// Command shieldlab is xdpshield's lab: the harness commands that prove the
// product (storm, study) and the processes they and the container lane
// start (study-edge, e2e-edge, e2e-storm). The product binary, shield,
// links none of this (cmd/shield's TestProductLinksNoLab).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

// commands is filled by the init functions of the subcommand files;
// hidden ones are left out of the usage (the container lane's agents).
var commands, hidden = map[string]command{}, map[string]command{}

// stdout is where commands print their results (tests replace it).
var stdout io.Writer = os.Stdout

const keyErr = "err"

func usage() {
	fmt.Fprintln(os.Stderr, "usage: shieldlab <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\n`shieldlab <command> -h` shows a command's flags.")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		cmd, ok = hidden[os.Args[1]]
	}
	if !ok {
		if os.Args[1] != "-h" && os.Args[1] != "help" && os.Args[1] != "--help" {
			fmt.Fprintf(os.Stderr, "shieldlab: unknown command %q\n\n", os.Args[1])
		}
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.run(ctx, os.Args[2:])
	stop()
	if err != nil {
		slog.Error("shieldlab "+os.Args[1], keyErr, err)
		os.Exit(1)
	}
}

// helpOK turns -h (flag.ErrHelp, usage already printed) into a clean exit.
func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
