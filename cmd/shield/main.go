// Command shield is xdpshield's product binary. Each subcommand lives in its
// own file and registers itself in commands. The lab's commands (storm,
// study) are cmd/shieldlab's: shield links no test or lab code.
package main

import (
	"context"
	"fmt"
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
// hidden ones are left out of the usage.
var commands, hidden = map[string]command{}, map[string]command{}

// labCommands are the commands that moved to the lab's binary,
// cmd/shieldlab: shield names it rather than calling them unknown.
var labCommands = map[string]bool{"storm": true, "study": true, "study-edge": true, "e2e-edge": true, "e2e-storm": true}

// labHint says where a command that moved to cmd/shieldlab went.
func labHint(name string) (string, bool) {
	if !labCommands[name] {
		return "", false
	}
	return fmt.Sprintf("shield: %s is a lab command: run `shieldlab %[1]s` (go run ./cmd/shieldlab %[1]s)", name), true
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: shield <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\n`shield <command> -h` shows a command's flags (`shield <command> <sub> -h` for allow, deny and limits).")
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
	if hint, lab := labHint(os.Args[1]); !ok && lab {
		fmt.Fprintln(os.Stderr, hint)
		os.Exit(2)
	}
	if !ok {
		if os.Args[1] != "-h" && os.Args[1] != "help" && os.Args[1] != "--help" {
			fmt.Fprintf(os.Stderr, "shield: unknown command %q\n\n", os.Args[1])
		}
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.run(ctx, os.Args[2:])
	stop()
	if err != nil {
		slog.Error("shield "+os.Args[1], keyErr, err)
		os.Exit(1)
	}
}
