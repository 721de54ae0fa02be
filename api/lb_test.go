package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// newLBEnv is newEnv with a loaded (unattached) balancer holding one
// service, tcp/198.18.1.1:80 with two backends.
func newLBEnv(t *testing.T) (*env, *lb.LB) {
	t.Helper()
	testutil.Root(t)
	l, err := lb.Load(lb.Options{ReverseSize: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	e := newEnv(t, api.Options{LB: l})
	err = l.AddService(lbconf.Service{
		ServiceKey: lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.1"), Port: 80, Proto: lbconf.TCP},
		Mode:       lbconf.Maglev,
		Backends:   []lbconf.Backend{{Addr: netip.MustParseAddrPort("198.18.2.1:8080")}, {Addr: netip.MustParseAddrPort("198.18.2.2:8080")}},
	})
	require.NoError(t, err)
	return e, l
}

// wantCapacity is reverse_capacity: the fallback LRU's 1024 (newLBEnv),
// 0 when state lives on the sockets.
func wantCapacity(l *lb.LB) uint32 {
	if l.StateMode() == lb.StateSocket {
		return 0
	}
	return 1024
}

// TestLBAPI: list, add, drain and remove through the API; changes need the
// token; bad input is a 400 naming the problem and changes nothing.
func TestLBAPI(t *testing.T) {
	e, l := newLBEnv(t)
	c := e.client()
	ctx := context.Background()
	const svc = "tcp/198.18.1.1:80"

	r, err := c.LB(ctx)
	require.NoError(t, err)
	want := []api.LBService{{Service: svc, Mode: "maglev", Backends: []api.LBBackend{{Addr: "198.18.2.1:8080", State: "active", Weight: 1}, {Addr: "198.18.2.2:8080", State: "active", Weight: 1}}}}
	assert.False(t, !reflect.DeepEqual(r.Services, want) || r.ReverseCapacity != wantCapacity(l) || r.StateMode != string(l.StateMode()), "GET /v1/lb = %+v, want services %+v, reverse capacity %d, state mode %s", r, want, wantCapacity(l), l.StateMode())

	code, _ := e.do(t, "POST", "/v1/lb/backends", "", `{"service":"`+svc+`","backends":["198.18.2.3:8080"]}`)
	assert.Equal(t, http.StatusUnauthorized, code, "POST /v1/lb/backends without token = %d, want 401", code)
	for _, tc := range []struct {
		method, path, body, want string
	}{
		{"POST", "/v1/lb/backends", `{"service":"tcp/198.18.1.9:80","backends":["198.18.2.3:8080"]}`, "unknown service tcp/198.18.1.9:80"},
		{"POST", "/v1/lb/backends", `{"service":"` + svc + `","backends":["198.18.2.1:8080"]}`, "duplicate backend 198.18.2.1:8080"},
		{"POST", "/v1/lb/backends", `{"service":"` + svc + `","backends":["198.18.2.3:8080","198.18.1.1:8080"]}`, "VIP 198.18.1.1 is a backend address"},
		{"POST", "/v1/lb/backends", `{"service":"` + svc + `","backends":["198.18.2.3:0"]}`, "port 0 is not a port"},
		{"POST", "/v1/lb/backends", `{"service":"` + svc + `","backends":["198.18.2.300:80"]}`, `backend "198.18.2.300:80"`},
		{"POST", "/v1/lb/backends", `{"service":"tcp/198.18.1.1","backends":["198.18.2.3:80"]}`, `service "tcp/198.18.1.1"`},
		{"DELETE", "/v1/lb/backends", `{"service":"` + svc + `","backends":["198.18.2.1:8080","198.18.2.2:8080"]}`, "zero backends"},
		{"POST", "/v1/lb/drain", `{"service":"` + svc + `","backends":["198.18.2.9:8080"]}`, "no backend 198.18.2.9:8080"},
		// Issue 25, finding 4: more backends than the table tells apart.
		{"POST", "/v1/lb/backends", `{"service":"` + svc + `","backends":["` + strings.Join(manyBackends(lbconf.MaxServiceBackends-1), `","`) + `"]}`,
			"164 backends, more than the 163"},
		{"POST", "/v1/lb/drain", `{"service":"` + svc + `","backends":["198.18.2.1:8080"],"extra":1}`, `unknown field "extra"`},
	} {
		before := l.Services()
		code, body := e.do(t, tc.method, tc.path, bearer, tc.body)
		var er api.ErrorResponse
		json.Unmarshal([]byte(body), &er)
		assert.False(t, code != http.StatusBadRequest || !strings.Contains(er.Error, tc.want), "%s %s %s = %d %s, want 400 naming %q", tc.method, tc.path, tc.body, code, body, tc.want)
		after := l.Services()
		assert.True(t, reflect.DeepEqual(after, before), "%s %s %s changed the services: %+v, want %+v", tc.method, tc.path, tc.body, after, before)
	}

	s, err := c.LBChange(ctx, "add", svc, []string{"198.18.2.3:8080"})
	require.False(t, err != nil || len(s.Backends) != 3, "add: %+v, %v; want three backends", s, err)
	s, err = c.LBChange(ctx, "drain", svc, []string{"198.18.2.1:8080"})
	require.False(t, err != nil || s.Backends[0] != (api.LBBackend{Addr: "198.18.2.1:8080", State: "draining", Weight: 1}), "drain: %+v, %v; want 198.18.2.1:8080 draining", s, err)
	s, err = c.LBChange(ctx, "remove", svc, []string{"198.18.2.1:8080"})
	require.False(t, err != nil || len(s.Backends) != 2, "remove: %+v, %v; want two backends", s, err)
	got, _ := l.Service(lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.1"), Port: 80, Proto: lbconf.TCP})
	assert.False(t, len(got.Backends) != 2 || got.Backends[0].Addr.String() != "198.18.2.2:8080", "balancer holds %+v after the changes, want 198.18.2.2:8080 and 198.18.2.3:8080", got.Backends)
	assert.False(t, !strings.Contains(e.log.String(), `msg="lb changed"`) || !strings.Contains(e.log.String(), `msg="lb change refused"`), "log lacks the change and refusal lines:\n%s", e.log.String())
}

// TestLBMetrics: the shield_lb_* series are on /metrics and promtool
// accepts them.
func TestLBMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool not found (Debian package prometheus; ci/deps.sh installs it)")
	e, l := newLBEnv(t)
	resp, err := http.Get(e.srv.URL + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`shield_lb_calls_total{outcome="translated",service="tcp/198.18.1.1:80"} 0`,
		`shield_lb_calls_total{outcome="no_backend",service="tcp/198.18.1.1:80"} 0`,
		`shield_lb_backends{service="tcp/198.18.1.1:80",state="active"} 2`,
		`shield_lb_backends{service="tcp/198.18.1.1:80",state="draining"} 0`,
		"shield_lb_services 1",
		fmt.Sprintf("shield_lb_reverse_capacity %d", wantCapacity(l)),
		fmt.Sprintf(`shield_lb_state_mode{mode="%s"} 1`, l.StateMode()),
		`shield_lb_state_events_total{event="evicted"} 0`,
		"shield_lb_reverse_entries 0",
		"shield_lb_not_service_calls_total 0",
	} {
		assert.Contains(t, text, want+"\n", "/metrics lacks %q", want)
	}
	f := filepath.Join(t.TempDir(), "metrics")
	os.WriteFile(f, b, 0o600)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin, _ = os.Open(f)
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "promtool check metrics:\n%s", out)
	var r api.LBResponse
	code, body := e.do(t, "GET", "/v1/lb", "", "")
	assert.False(t, code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil, "GET /v1/lb = %d %s", code, body)
}

// manyBackends are n backend addresses 198.18.4.0:80 onwards.
func manyBackends(n int) []string {
	var out []string
	for i := range n {
		out = append(out, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(4 + i/256), byte(i)}), 80).String())
	}
	return out
}
