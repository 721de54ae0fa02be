package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/l7"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// TestServeL7Change changes the [l7] policy of a running serve with `shield
// l7 set -f FILE`: refused without the token and for a file with an error
// (nothing applied: the old policy still answers), in force at once when
// good (on the same kept-alive connection, through the fast path where the
// kernel runs it), printed back by `shield l7 get`; and after a kill -9 in
// the middle of a change, the restarted serve enforces the configuration
// file's policy (a change lives as long as the process).
func TestServeL7Change(t *testing.T) {
	l := newLab(t, "l7ch")
	b1, b2 := l.l7Backend(t, "198.18.0.1:9001"), l.l7Backend(t, "198.18.0.1:9002")
	dir := t.TempDir()
	conf := filepath.Join(dir, "shield.toml")
	require.NoError(t, os.WriteFile(conf, []byte(`[l7]
listen = "198.18.0.1:80"
[[l7.route]]
name = "all"
path_prefix = "/"
backends = ["198.18.0.1:9001"]
[[l7.rbac]]
name = "no-admin"
action = "deny"
path_prefix = "/admin"
`), 0o600))
	next := filepath.Join(dir, "next.toml")
	require.NoError(t, os.WriteFile(next, []byte(`[[l7.route]]
name = "all"
path_prefix = "/"
backends = ["198.18.0.1:9002"]
[[l7.rbac]]
name = "no-x"
action = "deny"
path_prefix = "/x"
`), 0o600))
	bad := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte(`[l7]
listen = "198.18.0.1:81"
[[l7.route]]
name = "all"
path_prefix = "/"
backends = ["198.18.0.1:9002"]
`), 0o600))
	s := l.serve(t, "-config", conf)
	s.waitLog(t, `msg="l7 proxy serving`)
	fast, _ := l7.KernelServes()

	c := l.l7Client(t, "198.18.0.2")
	get := func(c *http.Client, path string) string {
		t.Helper()
		resp, err := c.Get("http://198.18.0.1" + path)
		require.NoError(t, err, "GET %s: %v\nserve:\n%s", path, err, s.out)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	filePolicy := func(c *http.Client) {
		t.Helper()
		for i := range 5 {
			assert.Equal(t, fmt.Sprintf("200 198.18.0.1:9001 /x/%d", i), get(c, fmt.Sprintf("/x/%d", i)), "GET /x/%d (the file's policy)", i)
		}
		assert.Equal(t, "403 Forbidden", get(c, "/admin"), "GET /admin, want 403 (the file's policy)")
	}
	filePolicy(c)

	run := func(args ...string) (string, error) {
		cmd, out := l.shieldCmd(args...)
		err := cmd.Run()
		return out.String(), err
	}
	out, err := run("l7", "set", "-f", next)
	assert.Error(t, err, "shield l7 set without a token: want refused\n%s", out)
	assert.Contains(t, out, "changes need the operator token", "shield l7 set without a token = %v, want refused", err)
	out, err = run("l7", "set", "-f", bad, "-token-file", l.tokenFile)
	assert.Error(t, err, "shield l7 set of a file with listen: want refused\n%s", out)
	assert.Contains(t, out, "l7.listen and l7.fast_path change only with a restart", "shield l7 set of a file with listen = %v, want refused", err)
	out, err = run("l7", "set", "-f", conf, "-token-file", l.tokenFile)
	assert.Error(t, err, "shield l7 set of serve's whole file: want refused\n%s", out)
	assert.True(t, strings.Contains(out, "unknown keys") || strings.Contains(out, "l7.listen"), "shield l7 set of serve's whole file = %v\n%s, want refused", err, out)
	// The API itself refuses a change without the token or with a wrong
	// one (the CLI above stopped before asking).
	for _, tok := range []string{"", "not-the-token-0123456789"} {
		anon := *l.client
		anon.Token = tok
		_, err := anon.SetL7Policy(context.Background(), policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{"198.18.0.1:9002"}}}})
		var ae *client.Error
		if assert.ErrorAs(t, err, &ae, "PUT /v1/l7/policy with token %q = %v, want 401", tok, err) {
			assert.Equal(t, http.StatusUnauthorized, ae.Status, "PUT /v1/l7/policy with token %q = %v, want 401", tok, err)
		}
	}
	filePolicy(c)

	st0, err := l.client.L7(context.Background())
	require.NoError(t, err)
	out, err = run("l7", "set", "-f", next, "-token-file", l.tokenFile)
	require.NoError(t, err, "shield l7 set:\n%s", out)
	require.Contains(t, out, "l7 policy generation 2: 1 routes, 1 rules", "shield l7 set")
	hits1 := len(b1.requests())
	for i := range 10 {
		assert.Equal(t, fmt.Sprintf("200 198.18.0.1:9002 /y/%d", i), get(c, fmt.Sprintf("/y/%d", i)), "after the change: GET /y/%d", i)
	}
	assert.Equal(t, "403 Forbidden", get(c, "/x/1"), "after the change: GET /x/1, want 403")
	more := len(b1.requests()) - hits1
	assert.Zero(t, more, "after the change: 9001 got %d more, 9002 %d, want 0 and 10", more, len(b2.requests()))
	assert.Len(t, b2.requests(), 10, "after the change: 9001 got %d more, 9002 %d, want 0 and 10", more, len(b2.requests()))
	st1, err := l.client.L7(context.Background())
	require.NoError(t, err)
	const gen2 = "GET /v1/l7 = %+v, want generation 2, rule no-x with 1 denied"
	assert.EqualValues(t, 2, st1.PolicyGeneration, gen2, st1)
	if assert.Len(t, st1.RBAC, 1, gen2, st1) {
		assert.Equal(t, "no-x", st1.RBAC[0].Name, gen2, st1)
		assert.EqualValues(t, 1, st1.RBAC[0].Denied, gen2, st1)
	}
	if fast {
		assert.GreaterOrEqual(t, st1.Routes[0].Fast-st0.Routes[0].Fast, uint64(5), "route all: %d of the 10 requests after the change fast, want most (kernel %v)", st1.Routes[0].Fast-st0.Routes[0].Fast, st1.FastPath.Messages)
	}
	out, err = run("l7", "get")
	require.NoError(t, err, "shield l7 get = %v\n%s", err, out)
	var got struct {
		L7 policy.Config `toml:"l7"`
	}
	_, err = toml.Decode(out, &got)
	if assert.NoError(t, err, "shield l7 get:\n%s", out) && assert.Len(t, got.L7.Routes, 1, "shield l7 get = %+v, want the new policy:\n%s", got.L7, out) &&
		assert.NotEmpty(t, got.L7.RBAC, "shield l7 get = %+v, want the new policy:\n%s", got.L7, out) {
		assert.Equal(t, "198.18.0.1:9002", got.L7.Routes[0].Backends[0], "shield l7 get = %+v, want the new policy:\n%s", got.L7, out)
		assert.Equal(t, "no-x", got.L7.RBAC[0].Name, "shield l7 get = %+v, want the new policy:\n%s", got.L7, out)
	}

	// kill -9 while a change is under way: the restarted serve reads its
	// file again.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			if _, err := run("l7", "set", "-f", next, "-token-file", l.tokenFile); err != nil {
				return
			}
		}
	}()
	waitFor(t, "changes under way", func() bool { return strings.Count(s.out.String(), `msg="l7 policy changed"`) >= 3 })
	require.NoError(t, s.cmd.Process.Kill())
	<-s.done
	s.done <- nil
	<-done
	s2 := l.serve(t, "-config", conf)
	s2.waitLog(t, `msg="l7 proxy serving`)
	p, err := l.client.L7Policy(context.Background())
	if assert.NoError(t, err, "after kill -9 and restart: GET /v1/l7/policy") && assert.Len(t, p.Routes, 1, "after kill -9 and restart: GET /v1/l7/policy = %+v, want the file's", p) &&
		assert.NotEmpty(t, p.RBAC, "after kill -9 and restart: GET /v1/l7/policy = %+v, want the file's", p) {
		assert.Equal(t, "198.18.0.1:9001", p.Routes[0].Backends[0], "after kill -9 and restart: GET /v1/l7/policy = %+v, want the file's", p)
		assert.Equal(t, "no-admin", p.RBAC[0].Name, "after kill -9 and restart: GET /v1/l7/policy = %+v, want the file's", p)
	}
	st, err := l.client.L7(context.Background())
	if assert.NoError(t, err, "after kill -9 and restart") {
		assert.EqualValues(t, 1, st.PolicyGeneration, "after kill -9 and restart: generation %d, want 1", st.PolicyGeneration)
	}
	filePolicy(l.l7Client(t, "198.18.0.2"))
}
