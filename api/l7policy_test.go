package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/l7"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// l7Lab is an L7 proxy (the Go proxy alone) in a namespace of its own with
// two backends, served by the API under /v1/l7.
type l7Lab struct {
	*env
	ns     *topo.NS
	srv    *l7.Server
	b1, b2 string
}

func newL7Lab(t *testing.T) *l7Lab {
	t.Helper()
	testutil.Root(t)
	ns, err := topo.New("l7api")
	require.NoError(t, err, "topo.New")
	t.Cleanup(func() { ns.Close() })
	lab := &l7Lab{ns: ns}
	backend := func(name string) string {
		var ln net.Listener
		require.NoError(t, ns.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }))
		s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) })}
		go s.Serve(ln)
		t.Cleanup(func() { s.Close() })
		return ln.Addr().String()
	}
	lab.b1, lab.b2 = backend("b1"), backend("b2")
	sec := policy.Section{Listen: "127.0.0.1:8080", FastPath: "off", Config: policy.Config{
		Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{lab.b1}}},
		RBAC:   []policy.Rule{{Name: "no-admin", Action: "deny", PathPrefix: "/admin"}},
	}}
	require.NoError(t, ns.Do(func() (err error) { lab.srv, err = l7.Listen(sec, lab.dial); return err }), "l7.Listen")
	lab.srv.Start(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { lab.srv.Close() })
	lab.env = newEnv(t, api.Options{L7: lab.srv})
	return lab
}

func (l *l7Lab) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := l.ns.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// get sends GET path through the proxy and returns "CODE BODY".
func (l *l7Lab) get(t *testing.T, path string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: l.dial, DisableKeepAlives: true}}
	resp, err := c.Get("http://127.0.0.1:8080" + path)
	require.NoError(t, err, "GET %s", path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// TestL7PolicyAPI: PUT /v1/l7/policy needs the token like every change, is
// validated whole (400 naming each problem, nothing applied: requests still
// follow the old policy), and a good one is in force at once (GET
// /v1/l7/policy, requests, the generation in /v1/l7 and /metrics).
func TestL7PolicyAPI(t *testing.T) {
	l := newL7Lab(t)
	forwarded := 0 // requests route all sent to a backend
	oldPolicy := func(t *testing.T) {
		t.Helper()
		forwarded++
		assert.Equal(t, "200 b1", l.get(t, "/x"), "GET /x, want 200 b1 (the old policy)")
		assert.Equal(t, "403 Forbidden", l.get(t, "/admin"), "GET /admin, want 403 (the old policy)")
		code, body := l.do(t, "GET", "/v1/l7/policy", "", "")
		assert.False(t, code != 200 || !strings.Contains(body, `"no-admin"`) || strings.Contains(body, l.b2), "GET /v1/l7/policy = %d %s, want the old policy", code, body)
	}
	next := fmt.Sprintf(`{"route":[{"name":"all","path_prefix":"/","backends":[%q]}],"rbac":[{"name":"no-x","action":"deny","path_prefix":"/x"}]}`, l.b2)
	for _, tc := range []struct {
		name, token, body string
		code              int
		want              string
	}{
		{"no token", "", next, 401, "missing bearer token"},
		{"wrong token", "Bearer not-the-token-at-all", next, 401, "invalid token"},
		{"two problems", "Bearer " + testToken, `{"route":[{"name":"all","path_prefix":"x","backends":["198.18.0.1"]}],"rbac":[{"action":"drop"}]}`, 400,
			`l7.route[0].path_prefix: \"x\" must start with /`},
		{"every problem named", "Bearer " + testToken, `{"route":[{"name":"all","path_prefix":"x","backends":["198.18.0.1"]}],"rbac":[{"action":"drop"}]}`, 400,
			`l7.rbac[0].action: \"drop\", want allow or deny`},
		{"no routes", "Bearer " + testToken, `{"route":[]}`, 400, "l7.route: at least one route is needed"},
		{"route left out", "Bearer " + testToken, `{"rbac":[]}`, 400, `missing field \"route\"`},
		{"unknown field", "Bearer " + testToken, `{"route":[],"listen":"127.0.0.1:1"}`, 400, `unknown field \"listen\"`},
		{"malformed", "Bearer " + testToken, `{"route":[`, 400, "malformed JSON"},
		// Nested objects are as strict as the top level: encoding/json
		// would take the case-folded or the last key (deny turned allow).
		{"nested case-folded key", "Bearer " + testToken, strings.Replace(next, `"action":"deny"`, `"action":"deny","ACTION":"allow"`, 1), 400,
			`key \"rbac[0].ACTION\": did you mean \"action\"?`},
		{"nested duplicate key", "Bearer " + testToken, strings.Replace(next, `"action":"deny"`, `"action":"deny","action":"allow"`, 1), 400,
			`duplicate key \"rbac[0].action\"`},
		{"nested field left out", "Bearer " + testToken, strings.Replace(next, `"name":"all",`, "", 1), 400,
			`missing field \"route[0].name\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := l.do(t, "PUT", "/v1/l7/policy", tc.token, tc.body)
			assert.False(t, code != tc.code || !strings.Contains(body, tc.want), "PUT /v1/l7/policy = %d %s, want %d with %q", code, body, tc.code, tc.want)
			oldPolicy(t)
		})
	}

	ch, err := l.client().SetL7Policy(context.Background(), policy.Config{
		Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{l.b2}}},
		RBAC:   []policy.Rule{{Name: "no-x", Action: "deny", PathPrefix: "/x"}},
	})
	require.NoError(t, err, "SetL7Policy")
	assert.False(t, ch.Generation != 2 || ch.Old.RBAC[0].Name != "no-admin" || ch.New.Routes[0].Backends[0] != l.b2, "SetL7Policy = %+v, want generation 2, old and new", ch)
	for path, want := range map[string]string{"/x": "403 Forbidden", "/admin": "200 b2", "/y": "200 b2"} {
		assert.Equal(t, want, l.get(t, path), "after the change: GET %s", path)
	}
	got, err := l.client().L7Policy(context.Background())
	assert.False(t, err != nil || len(got.RBAC) != 1 || got.RBAC[0].Name != "no-x" || got.Routes[0].Backends[0] != l.b2, "L7Policy = %+v, %v, want the new policy", got, err)
	// GET's answer is a body PUT takes back.
	_, body := l.do(t, "GET", "/v1/l7/policy", "", "")
	code, resp := l.do(t, "PUT", "/v1/l7/policy", "Bearer "+testToken, body)
	assert.Equal(t, 200, code, "PUT of GET's answer = %d %s, want 200", code, resp)
	st, err := l.client().L7(context.Background())
	// /admin and /y after the change were forwarded too.
	assert.False(t, err != nil || st.PolicyGeneration != 3 || st.Routes[0].Slow != uint64(forwarded+2) || st.RBAC[0].Denied != 1, "L7() = %+v, %v, want generation 3, route all's %d forwarded kept across the changes, 1 denied by no-x", st, err, forwarded+2)
	m, err := l.client().Metrics(context.Background())
	require.NoError(t, err)
	for _, want := range []string{"shield_l7_policy_generation 3", `shield_l7_policy_changes_total{result="applied"} 2`,
		`shield_l7_policy_changes_total{result="refused"} 3`, `shield_l7_denied_total{rule="no-x"} 1`} {
		assert.Contains(t, m, want+"\n", "/metrics lacks %q", want)
	}
	assert.NotContains(t, m, `rule="no-admin"`, "/metrics still has the removed rule no-admin")
	logs := l.log.String()
	assert.False(t, !strings.Contains(logs, `msg="l7 policy changed" who=tester`) || !strings.Contains(logs, `msg="l7 policy change refused"`) ||
		!strings.Contains(logs, `msg="api unauthorized" method=PUT path=/v1/l7/policy`), "logs lack the change, the refusal or the 401:\n%s", logs)
	var js map[string]any
	assert.NoError(t, json.Unmarshal([]byte(body), &js), "GET /v1/l7/policy is not JSON")
}
