package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Exit statuses: the conventions of sysexits-less Unix tools (grep, Go's
// own commands): 2 for a command line the binary cannot act on.
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
)

// KeyErr is the log attribute key of an error.
const KeyErr = "err"

// Env is what a command runs with: where it prints, how its fatal error
// is logged, and the binary's version.
type Env struct {
	// Stdout and Stderr are where the command prints (tests capture
	// them).
	Stdout, Stderr io.Writer
	// LogFormat is the log format the fatal error is printed in (text or
	// json): a command sets it (serve from -log-format and the
	// configuration's [log] format) once it knows.
	LogFormat string
	// Version and Revision label the binary (shield version,
	// shield_build_info).
	Version, Revision string
}

// Command is one subcommand of shield.
type Command struct {
	Summary string
	Run     func(ctx context.Context, e *Env, args []string) error
}

// UsageError is a command line shield cannot act on (unknown command or
// subcommand, bad flag, missing or extra argument): exit status 2.
// Printed says the flag package already told the user (message and
// flags), so the caller adds nothing.
type UsageError struct {
	Err     error
	Printed bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef is a UsageError with a message.
func Usagef(format string, a ...any) error {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}

// HelpOK turns -h (flag.ErrHelp, usage already printed) into a clean exit.
func HelpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// Parse parses args into fs: the flags' usage goes to stdout for -h
// (flag.ErrHelp, which HelpOK turns into success) and to stderr with the
// error for a bad flag, which is a UsageError.
func (e *Env) Parse(fs *flag.FlagSet, args []string) error {
	var buf bytesWriter
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		e.Stdout.Write(buf)
		return err
	default:
		e.Stderr.Write(buf)
		return &UsageError{Err: err, Printed: true}
	}
}

// SubHelp answers `shield CMD -h` for the commands that want a
// subcommand first (allow, deny, limits, lb): want, on stdout.
func (e *Env) SubHelp(args []string, want string) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(e.Stdout, want)
		return true
	}
	return false
}

// PrintJSON prints v as indented JSON on stdout.
func (e *Env) PrintJSON(v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type bytesWriter []byte

func (b *bytesWriter) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// NewLogger is a logger writing to w in format (text or json) from level
// (debug, info, warn or error) up.
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(level))
	o := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
