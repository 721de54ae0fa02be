// Command shield is xdpshield's product binary: this package parses the
// command line and dispatches to the subcommands, which live in
// internal/cli (the commands that talk to a running service, probe,
// version) and internal/serve (serve, nft, detach). The lab's commands
// (storm, study) are cmd/shieldlab's: shield links no test or lab code.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/internal/serve"
)

// version and revision label the binary (logs, shield_build_info): from
// the build's own information (buildinfo.go), unless set at link time
// with -ldflags "-X main.version=v1.2.3 -X main.revision=...".
var (
	version  = ""
	revision = ""
)

func init() {
	version, revision = buildVersion(version, revision)
}

// commands are shield's subcommands, by name.
var commands = func() map[string]cli.Command {
	c := cli.Commands()
	maps.Copy(c, serve.Commands())
	return c
}()

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

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shield <command> [flags]\n\ncommands:")
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w, "\n`shield <command> -h` shows a command's flags (`shield <command> <sub> -h` for allow, deny and limits).")
	fmt.Fprintln(w, "Exit status: 0 success, 1 runtime error, 2 usage error.")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is shield with arguments args (without the program name), printing
// to out and errw: the exit status.
func run(ctx context.Context, args []string, out, errw io.Writer) int {
	if len(args) < 1 {
		usage(errw)
		return cli.ExitUsage
	}
	name := args[0]
	if name == "help" && len(args) > 1 {
		// `shield help CMD [SUB]` is `shield CMD [SUB] -h`.
		name, args = args[1], append(slices.Clone(args[1:]), "-h")
	}
	switch name {
	case "-h", "-help", "--help", "help":
		usage(out)
		return cli.ExitOK
	case "-version", "--version":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[name]
	if hint, lab := labHint(name); !ok && lab {
		fmt.Fprintln(errw, hint)
		return cli.ExitUsage
	}
	if !ok {
		fmt.Fprintf(errw, "shield: unknown command %q\n\n", name)
		usage(errw)
		return cli.ExitUsage
	}
	e := &cli.Env{Stdout: out, Stderr: errw, LogFormat: "text", Version: version, Revision: revision}
	err := cli.HelpOK(cmd.Run(ctx, e, args[1:]))
	if err == nil {
		return cli.ExitOK
	}
	var ue *cli.UsageError
	if errors.As(err, &ue) {
		if !ue.Printed {
			fmt.Fprintf(errw, "shield: %v\n`shield %s -h` shows its usage.\n", err, name)
		}
		return cli.ExitUsage
	}
	cli.NewLogger(errw, e.LogFormat, "info").Error("shield "+name, cli.KeyErr, err)
	return cli.ExitRuntime
}
