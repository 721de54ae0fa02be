package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/cli"
)

// runShield runs shield in-process with args: exit status, stdout, stderr.
// In-process: the unprivileged pass runs the test binary as nobody, who
// may not read the build directory to build or re-exec shield.
func runShield(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	code := run(context.Background(), args, &out, &errw)
	return code, out.String(), errw.String()
}

// TestCLIExitCodes: help exits 0 with the usage on stdout; a command line
// shield cannot act on (unknown command, bad flag, missing or extra
// argument) exits 2 with the complaint on stderr; a runtime error exits
// 1 (issue 28, CLI conventions).
func TestCLIExitCodes(t *testing.T) {
	for _, k := range []string{cli.EnvAPI, cli.EnvToken, cli.EnvTokenFile} {
		t.Setenv(k, "")
	}
	missing := filepath.Join(t.TempDir(), "missing.toml")
	badXDPLB := filepath.Join(t.TempDir(), "xdplb.toml")
	require.NoError(t, os.WriteFile(badXDPLB, []byte("next_hop = \"02:00:00:00:00:01\"\nsource4 = \"198.18.0.1\"\n[[vip]]\naddr = \"198.18.0.100\"\nport = 80\nproto = \"sctp\"\n[[vip.backend]]\naddr = \"198.18.0.10\"\n"), 0o600))
	const (
		toOut = "stdout"
		toErr = "stderr"
	)
	for _, tc := range []struct {
		args  []string
		code  int
		where string // where the output goes; the other stream stays empty
		want  string
	}{
		{nil, cli.ExitUsage, toErr, "usage: shield"},
		{[]string{"help"}, cli.ExitOK, toOut, "usage: shield"},
		{[]string{"-h"}, cli.ExitOK, toOut, "usage: shield"},
		{[]string{"-help"}, cli.ExitOK, toOut, "usage: shield"},
		{[]string{"--help"}, cli.ExitOK, toOut, "usage: shield"},
		{[]string{"help", "serve"}, cli.ExitOK, toOut, "-log-format"},
		{[]string{"help", "limits", "set"}, cli.ExitOK, toOut, "-rate"},
		{[]string{"help", "bogus"}, cli.ExitUsage, toErr, `unknown command "bogus"`},
		{[]string{"version"}, cli.ExitOK, toOut, "shield "},
		{[]string{"--version"}, cli.ExitOK, toOut, "shield "},
		{[]string{"-version"}, cli.ExitOK, toOut, "shield "},
		{[]string{"version", "-json"}, cli.ExitOK, toOut, `"version"`},
		{[]string{"version", "extra"}, cli.ExitUsage, toErr, "unexpected arguments"},
		{[]string{"bogus"}, cli.ExitUsage, toErr, `unknown command "bogus"`},
		{[]string{"storm"}, cli.ExitUsage, toErr, "shieldlab storm"},
		{[]string{"serve", "-h"}, cli.ExitOK, toOut, "-log-format"},
		{[]string{"serve", "-bogus"}, cli.ExitUsage, toErr, "flag provided but not defined: -bogus"},
		{[]string{"serve", "-table-size", "many"}, cli.ExitUsage, toErr, "invalid value"},
		{[]string{"serve", "extra"}, cli.ExitUsage, toErr, "unexpected arguments"},
		{[]string{"serve", "-iface", "lo", "-config", missing}, cli.ExitRuntime, toErr, "no such file"},
		{[]string{"status", "-h"}, cli.ExitOK, toOut, "-api"},
		{[]string{"status", "-bogus"}, cli.ExitUsage, toErr, "flag provided but not defined"},
		{[]string{"top", "-h"}, cli.ExitOK, toOut, "-api"},
		{[]string{"top", "extra"}, cli.ExitUsage, toErr, "unexpected arguments"},
		{[]string{"detach", "-h"}, cli.ExitOK, toOut, "-iface"},
		{[]string{"detach"}, cli.ExitUsage, toErr, "-iface is required"},
		{[]string{"probe", "-h"}, cli.ExitOK, toOut, "-iface"},
		{[]string{"probe"}, cli.ExitUsage, toErr, "-iface is required"},
		{[]string{"nft", "-h"}, cli.ExitOK, toOut, "-config"},
		{[]string{"nft", "extra"}, cli.ExitUsage, toErr, "unexpected arguments"},
		{[]string{"l7", "-h"}, cli.ExitOK, toOut, "-api"},
		{[]string{"l7", "extra"}, cli.ExitUsage, toErr, "unexpected arguments"},
		{[]string{"l7", "set", "-h"}, cli.ExitOK, toOut, "-f"},
		{[]string{"l7", "set"}, cli.ExitUsage, toErr, "want -f FILE"},
		{[]string{"allow", "-h"}, cli.ExitOK, toOut, "allow add|del|list"},
		{[]string{"allow"}, cli.ExitUsage, toErr, "allow add|del|list"},
		{[]string{"allow", "add", "-h"}, cli.ExitOK, toOut, "-token-file"},
		{[]string{"allow", "add"}, cli.ExitUsage, toErr, "give CIDRs"},
		{[]string{"allow", "add", "198.18.0.1/32"}, cli.ExitRuntime, toErr, "operator token"},
		{[]string{"deny", "list", "198.18.0.1/32"}, cli.ExitUsage, toErr, "takes no CIDRs"},
		{[]string{"deny", "frob"}, cli.ExitUsage, toErr, "deny add|del|list"},
		{[]string{"limits", "-h"}, cli.ExitOK, toOut, "limits get"},
		{[]string{"limits"}, cli.ExitUsage, toErr, "limits get"},
		{[]string{"limits", "set", "-h"}, cli.ExitOK, toOut, "-rate"},
		{[]string{"limits", "set", "-rate", "x"}, cli.ExitUsage, toErr, "invalid value"},
		{[]string{"limits", "get", "extra"}, cli.ExitUsage, toErr, "unexpected arguments"},
		{[]string{"lb", "-h"}, cli.ExitOK, toOut, "lb list"},
		{[]string{"lb"}, cli.ExitUsage, toErr, "lb list"},
		{[]string{"lb", "list", "-h"}, cli.ExitOK, toOut, "-api"},
		{[]string{"lb", "list", "extra"}, cli.ExitUsage, toErr, "takes no arguments"},
		{[]string{"lb", "add", "tcp/198.18.0.100:80"}, cli.ExitUsage, toErr, "at least one ADDR:PORT"},
		{[]string{"xdplb", "-h"}, cli.ExitOK, toOut, "xdplb apply FILE"},
		{[]string{"xdplb", "bogus"}, cli.ExitUsage, toErr, "xdplb list"},
		{[]string{"xdplb", "list", "extra"}, cli.ExitUsage, toErr, "takes no arguments"},
		{[]string{"xdplb", "apply"}, cli.ExitUsage, toErr, "want one FILE"},
		{[]string{"xdplb", "apply", missing}, cli.ExitRuntime, toErr, "no such file"},
		{[]string{"xdplb", "apply", badXDPLB}, cli.ExitRuntime, toErr, "/sctp: proto"},
	} {
		name := "shield " + strings.Join(tc.args, " ")
		code, out, errw := runShield(t, tc.args...)
		assert.Equal(t, tc.code, code, "%s: exit status (stdout %q, stderr %q)", name, out, errw)
		if tc.where == toOut {
			assert.Contains(t, out, tc.want, "%s: stdout", name)
			assert.Empty(t, errw, "%s: stderr", name)
		} else {
			assert.Contains(t, errw, tc.want, "%s: stderr", name)
			assert.Empty(t, out, "%s: stdout", name)
		}
	}
}

// TestVersion: `shield version` prints the version and revision
// shield_build_info carries (buildinfo.go) and the Go version; -json the
// same as fields.
func TestVersion(t *testing.T) {
	code, out, _ := runShield(t, "version")
	require.Equal(t, cli.ExitOK, code)
	assert.Contains(t, out, version)
	assert.Contains(t, out, strings.TrimSuffix(revision, "-dirty"))
	assert.Contains(t, out, runtime.Version())

	code, out, _ = runShield(t, "--version", "-json")
	require.Equal(t, cli.ExitOK, code)
	var v cli.VersionInfo
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	assert.Equal(t, version, v.Version)
	assert.Equal(t, revision, v.Revision+map[bool]string{true: "-dirty"}[v.Dirty])
	assert.Equal(t, runtime.Version(), v.Go)
}

// TestFatalErrorJSON: with -log-format json (or the file's [log] format
// json), the error shield exits with is a JSON log line.
func TestFatalErrorJSON(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "shield.toml")
	writeFile(t, cfg, "iface = \"lo\"\ntable_size = 3\n[log]\nformat = \"json\"\n")
	for _, args := range [][]string{
		{"serve", "-log-format", "json", "-iface", "lo", "-config", filepath.Join(dir, "missing.toml")},
		{"serve", "-config", cfg},
	} {
		code, out, errw := runShield(t, args...)
		assert.Equal(t, cli.ExitRuntime, code, "%v", args)
		assert.Empty(t, out, "%v", args)
		var line map[string]any
		require.NoError(t, json.Unmarshal([]byte(errw), &line), "%v: stderr %q", args, errw)
		assert.Equal(t, "ERROR", line["level"], "%v", args)
		assert.NotEmpty(t, line["err"], "%v", args)
	}
	code, _, errw := runShield(t, "serve", "-log-format", "text", "-config", cfg)
	assert.Equal(t, cli.ExitRuntime, code)
	assert.True(t, strings.HasPrefix(errw, "time="), "the flag overrides the file: %q", errw)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
}

// TestCheckSummary: `serve -check` prints what serve would run with, one
// setting a line, not a Go struct dump.
func TestCheckSummary(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "shield.toml")
	writeFile(t, cfg, "iface = \"lo\"\n[limits]\nrate = 100\nburst = 200\nprotected = [\"tcp/443\"]\n[lists]\ndeny = [\"198.18.0.0/24\"]\n")
	code, out, errw := runShield(t, "serve", "-check", "-config", cfg)
	require.Equal(t, cli.ExitOK, code, errw)
	assert.Empty(t, errw)
	assert.NotContains(t, out, "{", "a struct dump")
	assert.Contains(t, out, "configuration OK ("+cfg+")\n")
	for _, want := range []string{
		"  iface            lo\n",
		"  limits           rate 100/s burst 200,",
		"  protected        tcp/443\n",
		"  keyed by         IPv4 /32, IPv6 /64\n",
		"  deny list        1 prefixes\n",
		"  workbench        off\n",
	} {
		assert.Contains(t, out, want)
	}
	// -workbench turns it on; a missing lab binary is said, not fatal.
	code, out, errw = runShield(t, "serve", "-check", "-config", cfg, "-workbench")
	require.Equal(t, cli.ExitOK, code, errw)
	assert.Contains(t, out, "  workbench        http://127.0.0.1:9470/workbench/, read-only view on, sessions 1h0m0s; ")
}

// TestCheckNamesLine: an invalid configuration file is reported with the
// line (and column, where the TOML parser gives it) of the offending
// key; a key a flag set names no line.
func TestCheckNamesLine(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		file  string
		flags []string
		want  string
	}{
		// Syntax: the parser's own position.
		{"iface = \"lo\"\n[limits]\nrate = \n", nil, ":3:8: expected value"},
		// Semantic: validate's "key: message", placed on the key's line.
		{"iface = \"lo\"\n\n[log]\n  format = \"yaml\"\n", nil, ":4:3: log.format: unknown format"},
		{"iface = \"lo\"\ntable_size = 3000\n", nil, ":2:1: table_size:"},
		{"iface = \"lo\"\n[api]\nlisten = \"198.18.0.1:9470\"\n", nil, ":3:1: "},
		{"iface = \"lo\"\n[api]\nbogus = 1\n", nil, "unknown keys: api.bogus (line 3, column 1)"},
		// An element of an array of tables, as the validation names it.
		{"iface = \"lo\"\n[[lb.service]]\nvip = \"198.18.0.100\"\nport = 80\nbackends = [\"198.18.0.13:8080\"]\n\n[[lb.service]]\nvip = \"bogus\"\n", nil, ":7:3: lb.service[1]:"},
		{"iface = \"lo\"\n[limits]\nburst = -1\n", nil, "limits.burst = -1 (line 3, column 1)"},
	} {
		cfg := filepath.Join(dir, fmt.Sprintf("c%d.toml", i))
		writeFile(t, cfg, tc.file)
		code, _, errw := runShield(t, append([]string{"serve", "-check", "-config", cfg}, tc.flags...)...)
		assert.Equal(t, cli.ExitRuntime, code, "%q", tc.file)
		assert.Contains(t, errw, tc.want, "%q", tc.file)
		assert.Contains(t, errw, cfg, "%q", tc.file)
	}
	// The flag's value is refused, not the file's line.
	cfg := filepath.Join(dir, "flag.toml")
	writeFile(t, cfg, "iface = \"lo\"\ntable_size = 3000\n")
	_, _, errw := runShield(t, "serve", "-check", "-config", cfg, "-table-size", "5")
	assert.Contains(t, errw, `table_size: 5 out of range`)
	assert.NotContains(t, errw, cfg+":2:")
}
