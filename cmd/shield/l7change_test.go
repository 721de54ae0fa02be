package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/xdpshield/xdpshield/api"
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
	if err := os.WriteFile(conf, []byte(`[l7]
listen = "198.18.0.1:80"
[[l7.route]]
name = "all"
path_prefix = "/"
backends = ["198.18.0.1:9001"]
[[l7.rbac]]
name = "no-admin"
action = "deny"
path_prefix = "/admin"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(dir, "next.toml")
	if err := os.WriteFile(next, []byte(`[[l7.route]]
name = "all"
path_prefix = "/"
backends = ["198.18.0.1:9002"]
[[l7.rbac]]
name = "no-x"
action = "deny"
path_prefix = "/x"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte(`[l7]
listen = "198.18.0.1:81"
[[l7.route]]
name = "all"
path_prefix = "/"
backends = ["198.18.0.1:9002"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := l.serve(t, "-config", conf)
	s.waitLog(t, `msg="l7 proxy serving`)
	fast, _ := l7.KernelServes()

	c := l.l7Client(t, "198.18.0.2")
	get := func(c *http.Client, path string) string {
		t.Helper()
		resp, err := c.Get("http://198.18.0.1" + path)
		if err != nil {
			t.Fatalf("GET %s: %v\nserve:\n%s", path, err, s.out)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	filePolicy := func(c *http.Client) {
		t.Helper()
		for i := range 5 {
			if got, want := get(c, fmt.Sprintf("/x/%d", i)), fmt.Sprintf("200 198.18.0.1:9001 /x/%d", i); got != want {
				t.Errorf("GET /x/%d = %q, want %q (the file's policy)", i, got, want)
			}
		}
		if got := get(c, "/admin"); got != "403 Forbidden" {
			t.Errorf("GET /admin = %q, want 403 (the file's policy)", got)
		}
	}
	filePolicy(c)

	run := func(args ...string) (string, error) {
		cmd, out := l.shieldCmd(args...)
		err := cmd.Run()
		return out.String(), err
	}
	if out, err := run("l7", "set", "-f", next); err == nil || !strings.Contains(out, "changes need the operator token") {
		t.Errorf("shield l7 set without a token = %v\n%s, want refused", err, out)
	}
	if out, err := run("l7", "set", "-f", bad, "-token-file", l.tokenFile); err == nil || !strings.Contains(out, "l7.listen and l7.fast_path change only with a restart") {
		t.Errorf("shield l7 set of a file with listen = %v\n%s, want refused", err, out)
	}
	if out, err := run("l7", "set", "-f", conf, "-token-file", l.tokenFile); err == nil || !strings.Contains(out, "unknown keys") && !strings.Contains(out, "l7.listen") {
		t.Errorf("shield l7 set of serve's whole file = %v\n%s, want refused", err, out)
	}
	// The API itself refuses a change without the token or with a wrong
	// one (the CLI above stopped before asking).
	for _, tok := range []string{"", "not-the-token-0123456789"} {
		anon := *l.client
		anon.Token = tok
		_, err := anon.SetL7Policy(context.Background(), policy.Config{Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{"198.18.0.1:9002"}}}})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Errorf("PUT /v1/l7/policy with token %q = %v, want 401", tok, err)
		}
	}
	filePolicy(c)

	st0, err := l.client.L7(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, err := run("l7", "set", "-f", next, "-token-file", l.tokenFile)
	if err != nil || !strings.Contains(out, "l7 policy generation 2: 1 routes, 1 rules") {
		t.Fatalf("shield l7 set = %v\n%s", err, out)
	}
	hits1 := len(b1.requests())
	for i := range 10 {
		if got, want := get(c, fmt.Sprintf("/y/%d", i)), fmt.Sprintf("200 198.18.0.1:9002 /y/%d", i); got != want {
			t.Errorf("after the change: GET /y/%d = %q, want %q", i, got, want)
		}
	}
	if got := get(c, "/x/1"); got != "403 Forbidden" {
		t.Errorf("after the change: GET /x/1 = %q, want 403", got)
	}
	if n := len(b1.requests()) - hits1; n != 0 || len(b2.requests()) != 10 {
		t.Errorf("after the change: 9001 got %d more, 9002 %d, want 0 and 10", n, len(b2.requests()))
	}
	st1, err := l.client.L7(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st1.PolicyGeneration != 2 || len(st1.RBAC) != 1 || st1.RBAC[0].Name != "no-x" || st1.RBAC[0].Denied != 1 {
		t.Errorf("GET /v1/l7 = %+v, want generation 2, rule no-x with 1 denied", st1)
	}
	if fast && st1.Routes[0].Fast-st0.Routes[0].Fast < 5 {
		t.Errorf("route all: %d of the 10 requests after the change fast, want most (kernel %v)", st1.Routes[0].Fast-st0.Routes[0].Fast, st1.FastPath.Messages)
	}
	out, err = run("l7", "get")
	if err != nil {
		t.Fatalf("shield l7 get = %v\n%s", err, out)
	}
	var got struct {
		L7 policy.Config `toml:"l7"`
	}
	if _, err := toml.Decode(out, &got); err != nil || len(got.L7.Routes) != 1 || got.L7.Routes[0].Backends[0] != "198.18.0.1:9002" || got.L7.RBAC[0].Name != "no-x" {
		t.Errorf("shield l7 get = %+v, %v, want the new policy:\n%s", got.L7, err, out)
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
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	s.done <- nil
	<-done
	s2 := l.serve(t, "-config", conf)
	s2.waitLog(t, `msg="l7 proxy serving`)
	p, err := l.client.L7Policy(context.Background())
	if err != nil || len(p.Routes) != 1 || p.Routes[0].Backends[0] != "198.18.0.1:9001" || p.RBAC[0].Name != "no-admin" {
		t.Errorf("after kill -9 and restart: GET /v1/l7/policy = %+v, %v, want the file's", p, err)
	}
	if st, err := l.client.L7(context.Background()); err != nil || st.PolicyGeneration != 1 {
		t.Errorf("after kill -9 and restart: generation %d, %v, want 1", st.PolicyGeneration, err)
	}
	filePolicy(l.l7Client(t, "198.18.0.2"))
}
