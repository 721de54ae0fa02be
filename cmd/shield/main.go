// Command shield is xdpshield's product binary. Each subcommand lives in its
// own file and registers itself in commands. The lab's commands (storm,
// study) are cmd/shieldlab's: shield links no test or lab code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
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

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shield <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\n`shield <command> -h` shows a command's flags (`shield <command> <sub> -h` for allow, deny and limits).")
	fmt.Fprintln(w, "Exit status: 0 success, 1 runtime error, 2 usage error.")
}

// Exit statuses: the conventions of sysexits-less Unix tools (grep, Go's
// own commands): 2 for a command line the binary cannot act on.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// usageError is a command line shield cannot act on (unknown command or
// subcommand, bad flag, missing or extra argument): exit status 2.
// printed says the flag package already told the user (message and
// flags), so run adds nothing.
type usageError struct {
	err     error
	printed bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef is a usageError with a message.
func usagef(format string, a ...any) error {
	return &usageError{err: fmt.Errorf(format, a...)}
}

// parseFlags parses args into fs: the flags' usage goes to stdout for -h
// (flag.ErrHelp, which helpOK turns into success) and to stderr with the
// error for a bad flag, which is a usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var buf bytesWriter
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		stdout.Write(buf)
		return err
	default:
		stderr.Write(buf)
		return &usageError{err: err, printed: true}
	}
}

// subHelp answers `shield CMD -h` for the commands that want a
// subcommand first (allow, deny, limits, lb): want, on stdout.
func subHelp(args []string, want string) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, want)
		return true
	}
	return false
}

type bytesWriter []byte

func (b *bytesWriter) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// stderr is where shield prints its errors (tests capture it).
var stderr io.Writer = os.Stderr

// errLogFormat is the log format the fatal error is printed in: the
// command sets it (serve from -log-format and the configuration's
// [log] format) once it knows.
var errLogFormat = "text"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is shield with arguments args (without the program name), printing
// to out and errw: the exit status.
func run(ctx context.Context, args []string, out, errw io.Writer) int {
	stdout, stderr, errLogFormat = out, errw, "text"
	defer func() { stdout, stderr = os.Stdout, os.Stderr }()
	if len(args) < 1 {
		usage(errw)
		return exitUsage
	}
	name := args[0]
	if name == "help" && len(args) > 1 {
		// `shield help CMD [SUB]` is `shield CMD [SUB] -h`.
		name, args = args[1], append(slices.Clone(args[1:]), "-h")
	}
	switch name {
	case "-h", "-help", "--help", "help":
		usage(out)
		return exitOK
	case "-version", "--version":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[name]
	if !ok {
		cmd, ok = hidden[name]
	}
	if hint, lab := labHint(name); !ok && lab {
		fmt.Fprintln(errw, hint)
		return exitUsage
	}
	if !ok {
		fmt.Fprintf(errw, "shield: unknown command %q\n\n", name)
		usage(errw)
		return exitUsage
	}
	err := helpOK(cmd.run(ctx, args[1:]))
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		if !ue.printed {
			fmt.Fprintf(errw, "shield: %v\n`shield %s -h` shows its usage.\n", err, name)
		}
		return exitUsage
	}
	newLogger(errw, errLogFormat, "info").Error("shield "+name, keyErr, err)
	return exitRuntime
}
