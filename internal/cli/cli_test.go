package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// TestCLI runs every API command (status, top, limits get|set, allow and
// deny add|del|list) against an in-process service, as a table and with
// -json, and checks that refused changes are errors that change nothing.
func TestCLI(t *testing.T) {
	sh, url, tok := testService(t, nil)

	// run runs `shield NAME [SUB] -api URL [-token-file F] ARGS...` and
	// returns what it printed.
	run := func(auth bool, words ...string) (string, error) {
		t.Helper()
		name, rest := words[0], words[1:]
		var args []string
		if name == "limits" || name == "allow" || name == "deny" {
			args, rest = append(args, rest[0]), rest[1:]
		}
		args = append(args, "-api", url)
		if auth {
			args = append(args, "-token-file", tok)
		}
		var out bytes.Buffer
		err := Commands()[name].Run(context.Background(), testEnv(&out), append(args, rest...))
		return out.String(), err
	}
	mustRun := func(auth bool, words ...string) string {
		t.Helper()
		out, err := run(auth, words...)
		require.NoError(t, err, "shield %s", strings.Join(words, " "))
		return out
	}
	decode := func(out string, v any) {
		t.Helper()
		require.NoError(t, json.Unmarshal([]byte(out), v), "-json output %q", out)
	}
	contains := func(what, out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			assert.Contains(t, out, w, "%s printed %q, want it to contain %q", what, out, w)
		}
	}

	contains("allow add", mustRun(true, "allow", "add", "198.18.1.0/24", "2001:db8:1::/48"), "added 2 new prefixes; the allow list holds 2")
	var lr api.ListResponse
	decode(mustRun(true, "deny", "add", "-json", "198.19.0.0/16", "198.18.0.9"), &lr)
	assert.Equal(t, "deny", lr.List, "deny add -json = %+v, want deny with both added", lr)
	assert.Equal(t, "198.18.0.9/32 198.19.0.0/16", strings.Join(lr.Added, " "), "deny add -json = %+v, want deny with both added", lr)
	assert.Equal(t, "198.18.0.9/32\n198.19.0.0/16\n", mustRun(false, "deny", "list"), "deny list")
	decode(mustRun(false, "deny", "list", "-json"), &lr)
	assert.Len(t, lr.Prefixes, 2, "deny list -json = %+v, want 2 prefixes", lr)
	contains("deny del", mustRun(true, "deny", "del", "198.19.0.0/16"), "removed 1 prefixes; the deny list holds 1")

	contains("limits set", mustRun(true, "limits", "set", "-rate", "7", "-burst", "9"),
		"old rate 1000/s burst 2000", "new rate 7/s burst 9, admission 10000/s burst 10000, dry-run false")
	want := config.DefaultLimits()
	want.Rate, want.Burst = 7, 9
	var got config.Limits
	decode(mustRun(false, "limits", "get", "-json"), &got)
	assert.True(t, got.Equal(want), "limits get -json = %+v, want %+v", got, want)
	contains("limits get", mustRun(false, "limits", "get"), "rate 7/s burst 9, admission 10000/s burst 10000, dry-run false")
	var ch api.LimitsChange
	decode(mustRun(true, "limits", "set", "-json", "-dry-run=false"), &ch)
	assert.True(t, ch.Old.Equal(want) && ch.New.Equal(want), "limits set -json = %+v, want old and new %+v", ch, want)
	contains("limits set -protected", mustRun(true, "limits", "set", "-protected", "tcp/443,udp/198.18.0.1:53", "-unprotected-rate", "5000", "-key-prefix6", "56"),
		"new rate 7/s burst 9, admission 10000/s burst 10000, dry-run false; protected tcp/443,udp/198.18.0.1:53; unprotected 5000/s burst 250000", "keyed by /32 and /56")
	contains("limits set -aggregates", mustRun(true, "limits", "set", "-aggregates", "tcp/443=5000/10000"), "aggregates none\n", "aggregates tcp/443=5000/10000\n")
	contains("limits set -aggregates ''", mustRun(true, "limits", "set", "-aggregates", ""), "aggregates tcp/443=5000/10000\n", "aggregates none\n")
	contains("limits set -protected ''", mustRun(true, "limits", "set", "-protected", "", "-key-prefix6", "64", "-unprotected-rate", "250000"),
		"protected every destination; unprotected 250000/s")
	want.Protected = nil

	// Traffic: 198.18.0.7 passes its burst of 9, then 3 drop; a deny-listed
	// source drops.
	for i, src := range []string{"198.18.0.7", "198.18.0.9"} {
		f := sim.From(src, sim.UDP).Bytes()
		for range 12 - 10*i {
			_, err := sim.Run(sh.Program(), f)
			require.NoError(t, err)
		}
	}
	top := mustRun(false, "top", "-n", "3")
	contains("top", top, "SOURCE", "198.18.0.7", "(1 sources scanned")
	fs := strings.Fields(strings.Split(top, "\n")[1])
	assert.Equal(t, "1 198.18.0.7 9 3 yes", strings.Join(fs, " "), "top row = %q, want 1 198.18.0.7 9 3 yes", fs)
	var tr api.TopResponse
	decode(mustRun(false, "top", "-json", "-by", "passed"), &tr)
	assert.Equal(t, "passed", tr.By, "top -json -by passed = %+v", tr)
	if assert.Len(t, tr.Sources, 1, "top -json -by passed = %+v", tr) {
		assert.Equal(t, uint64(9), tr.Sources[0].Passed, "top -json -by passed = %+v", tr)
		assert.True(t, tr.Sources[0].Limited, "top -json -by passed = %+v", tr)
	}
	contains("status", mustRun(false, "status"), "sources  1 tracked of 4096", "limits   rate 7/s burst 9",
		"lists    allow 2 prefixes, deny 1 prefixes", "packets  passed 9, dropped 5")
	var st statusReport
	decode(mustRun(false, "status", "-json"), &st)
	assert.True(t, st.Limits.Equal(want), "status -json = %+v", st)
	assert.Equal(t, 2, st.Allow, "status -json = %+v", st)
	assert.Equal(t, 1, st.Deny, "status -json = %+v", st)
	assert.EqualValues(t, 3, st.Counters.Reasons["limit"], "status -json = %+v", st)
	assert.EqualValues(t, 2, st.Counters.Reasons["deny"], "status -json = %+v", st)

	// Refusals: errors, and the state is as it was.
	for _, tc := range []struct {
		auth  bool
		words []string
		want  string
	}{
		{false, []string{"limits", "set", "-rate", "1"}, "changes need the operator token"},
		{true, []string{"limits", "set"}, "nothing to change"},
		{true, []string{"limits", "set", "-rate", "0"}, "400 Bad Request: limits: rate 0 out of range"},
		{true, []string{"allow", "add", "198.18.2.0/24", "198.18.0.999"}, `400 Bad Request: prefixes: "198.18.0.999" is not an address or CIDR`},
		{true, []string{"deny", "del", "203.0.113.0/24"}, "400 Bad Request: not on the deny list: 203.0.113.0/24"},
		{true, []string{"deny", "list", "198.18.0.0/15"}, "deny list takes no CIDRs"},
		{false, []string{"top", "-n", "0"}, "400 Bad Request"},
		{false, []string{"top", "extra"}, "unexpected arguments"},
		{false, []string{"status", "extra"}, "unexpected arguments"},
		{false, []string{"limits", "show"}, "want `limits get`"},
	} {
		_, err := run(tc.auth, tc.words...)
		assert.ErrorContains(t, err, tc.want, "shield %s = %v, want an error containing %q", strings.Join(tc.words, " "), err, tc.want)
	}
	l := sh.Limits()
	assert.True(t, l.Equal(want), "limits after the refusals = %+v, want %+v", l, want)
	for l, n := range map[lists.List]int{lists.AllowList: 2, lists.DenyList: 1} {
		ps, err := sh.List(l)
		if assert.NoError(t, err, "%s list after the refusals", l) {
			assert.Len(t, ps, n, "%s list after the refusals = %v; want %d prefixes", l, ps, n)
		}
	}
}

const testToken = "lifecycle-test-token-0123456789"

// testEnv prints to out, and the errors of flags to the test binary's
// stderr, as shield does.
func testEnv(out io.Writer) *Env {
	return &Env{Stdout: out, Stderr: os.Stderr, LogFormat: "text"}
}

// testService serves an in-process API for the CLI to talk to: a shield
// (virtual clock) and, when l is not nil, the balancer, the admin socket
// the CLI reaches a local service by, and a token file holding testToken;
// the CLI's environment variables are cleared. It returns the shield, the
// API's URL and the token file.
func testService(t *testing.T, l *lb.LB) (*shield.Shield, string, string) {
	t.Helper()
	testutil.Root(t)
	for _, k := range []string{EnvAPI, EnvToken, EnvTokenFile} {
		t.Setenv(k, "")
	}
	sh, err := shield.Load(shield.Options{TableSize: 4096, Clock: config.ClockVirtual})
	require.NoError(t, err, "Load")
	t.Cleanup(func() { sh.Close() })
	srv := httptest.NewServer(api.NewServer(sh, api.Options{Token: testToken, NoProcessMetrics: true, LB: l,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	serveAdmin(t, srv.Config.Handler)
	tok := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tok, []byte(testToken+"\n"), 0o600))
	return sh, srv.URL, tok
}

// serveAdmin serves h on an admin socket in a directory of the test's and
// points the CLI at it ($SHIELD_ADMIN_SOCKET): the CLI reaches a local
// service only through one.
func serveAdmin(t *testing.T, h http.Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	t.Setenv(EnvAdminSocket, path)
	return path
}
