package l7

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/l7/policy"
)

// backend is a test server that counts what reaches it and answers its
// name, the method, the path and the X-User and X-Set headers it saw.
type backend struct {
	name string
	srv  *httptest.Server
	hits atomic.Int64
}

func newBackend(t *testing.T, name string) *backend {
	t.Helper()
	b := &backend{name: name}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Backend", name)
		fmt.Fprintf(w, "%s %s %s user=%q set=%q body=%q", name, r.Method, r.RequestURI, r.Header.Get("X-User"), r.Header.Get("X-Set"), body)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) addr() string { return b.srv.Listener.Addr().String() }

func startProxy(t *testing.T, cfg policy.Config) (*Proxy, string) {
	t.Helper()
	p, err := policy.Compile(cfg)
	require.NoError(t, err, "Compile")
	px := NewProxy(p, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := px.Server()
	go px.Serve(s, l)
	t.Cleanup(func() { s.Close() })
	return px, l.Addr().String()
}

func get(t *testing.T, addr, method, path, host string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	require.NoError(t, err)
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func TestProxyPolicy(t *testing.T) {
	api1, api2, web := newBackend(t, "api1"), newBackend(t, "api2"), newBackend(t, "web")
	px, addr := startProxy(t, policy.Config{
		Routes: []policy.Route{
			{Name: "api", Host: "api.test", PathPrefix: "/v1/", Backends: []string{api1.addr(), api2.addr()}},
			{Name: "web", PathPrefix: "/", Backends: []string{web.addr()}},
		},
		RBAC: []policy.Rule{
			{Name: "no-delete", Action: "deny", Methods: []string{"DELETE"}},
			{Name: "admin-ok", Action: "allow", PathPrefix: "/admin", Header: "X-User", Value: "root"},
			{Name: "admin", Action: "deny", PathPrefix: "/admin"},
			{Name: "loopback-secret", Action: "deny", PathPrefix: "/secret", Source: "127.0.0.0/8"},
		},
		HashHeader: "X-User",
		SetHeader:  policy.Header{Name: "X-Set", Value: "yes"},
	})
	tests := []struct {
		name, method, path, host string
		hdr                      map[string]string
		status                   int
		backend                  string // prefix of the body, "" when denied
	}{
		{"web", "GET", "/index", "www.test", nil, 200, "web"},
		{"api host", "GET", "/v1/x", "api.test", map[string]string{"X-User": "alice"}, 200, "api"},
		{"api prefix other host", "GET", "/v1/x", "www.test", nil, 200, "web"},
		{"delete denied", "DELETE", "/index", "www.test", nil, 403, ""},
		{"admin denied", "GET", "/admin/x", "www.test", nil, 403, ""},
		{"admin allowed by header", "GET", "/admin/x", "www.test", map[string]string{"X-User": "root"}, 200, "web"},
		{"source denied", "GET", "/secret", "www.test", nil, 403, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := api1.hits.Load() + api2.hits.Load() + web.hits.Load()
			status, body, _ := get(t, addr, tt.method, tt.path, tt.host, tt.hdr)
			require.EqualValues(t, tt.status, status, "%s %s = %d %q, want %d", tt.method, tt.path, status, body, tt.status)
			after := api1.hits.Load() + api2.hits.Load() + web.hits.Load()
			if tt.backend == "" {
				require.EqualValues(t, before, after, "denied request reached a backend (%d -> %d)", before, after)
				return
			}
			require.False(t, !strings.HasPrefix(body, tt.backend) || !strings.Contains(body, `set="yes"`), "body = %q, want from %s with X-Set yes", body, tt.backend)
		})
	}
	// The hash header keeps a user on one backend; users spread over both.
	seen := map[string]bool{}
	for i := 0; i < 40; i++ {
		user := fmt.Sprintf("user%d", i)
		var first string
		for k := 0; k < 3; k++ {
			_, body, _ := get(t, addr, "GET", "/v1/a", "api.test", map[string]string{"X-User": user})
			b, _, _ := strings.Cut(body, " ")
			if k == 0 {
				first = b
			} else {
				require.Equal(t, first, b, "user %s went to %s then %s", user, first, b)
			}
		}
		seen[first] = true
	}
	require.False(t, !seen["api1"] || !seen["api2"], "40 users all went to one backend: %v", seen)
	c := px.Counters()
	assert.False(t, c.Denied[0] != 1 || c.Denied[2] != 1 || c.Denied[3] != 1, "Denied = %v, want one per denying rule", c.Denied)
	assert.False(t, c.Routes[0].Requests != 121 || c.Routes[0].Class[2] != 121, "api route counters = %+v, want 121 requests, 121 2xx", c.Routes[0])
}

// rawGet sends one request line's target as written and returns the
// response's status and body.
func rawGet(t *testing.T, addr, target string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a.test\r\n\r\n", target)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "GET %q", target)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestProxyPathOneMeaning (issue 24, finding 1): a rule denying /admin
// denies every spelling of it, and the backend receives the path the
// policy judged. Red before: /%61dmin/secret, //admin/secret and
// /./admin/secret reached the backend (200).
func TestProxyPathOneMeaning(t *testing.T) {
	web := newBackend(t, "web")
	_, addr := startProxy(t, policy.Config{
		Routes: []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{web.addr()}}},
		RBAC:   []policy.Rule{{Action: "deny", PathPrefix: "/admin"}},
	})
	for _, tc := range []struct {
		target string
		status int
		uri    string // what the backend received, when forwarded
	}{
		{"/%61dmin/secret", 403, ""},
		{"/api/%2e%2e/admin", 403, ""},
		{"/%61pi/x", 200, "/api/x"},
		{"//admin/secret", 403, ""},
		{"/./admin/secret", 403, ""},
		{"/x/../admin", 403, ""},
		{"/x/..;/admin", 400, ""},
		{"/%2Fadmin", 400, ""},
		{"/adm%5cin", 400, ""},
		{"/a\\dmin", 400, ""},
		{"/a%zz", 400, ""},
		{"/x//y/./z?q=//./", 200, "/x/y/z?q=//./"},
		{"/a%3bb", 200, "/a%3Bb"},
		{"/plain?x=%61", 200, "/plain?x=%61"},
	} {
		status, body := rawGet(t, addr, tc.target)
		assert.Equal(t, tc.status, status, "GET %q: %s", tc.target, body)
		if tc.uri != "" {
			assert.Equal(t, "web GET "+tc.uri+` user="" set="" body=""`, body, "GET %q: what the backend received", tc.target)
		}
	}
	assert.Equal(t, int64(4), web.hits.Load(), "requests reaching the backend: only the allowed ones")
}
