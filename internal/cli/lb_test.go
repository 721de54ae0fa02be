package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestLBCLI runs `shield lb list|add|drain|remove` against an in-process
// service with a balancer, as a table and with -json.
func TestLBCLI(t *testing.T) {
	testutil.Root(t)
	l, err := lb.Load(lb.Options{ReverseSize: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	k := lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.1"), Port: 80, Proto: lbconf.TCP}
	require.NoError(t, l.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: []lbconf.Backend{{Addr: netip.MustParseAddrPort("198.18.2.1:8080")}}}))
	_, url, tok := testService(t, l)
	run := func(auth bool, sub string, rest ...string) (string, error) {
		t.Helper()
		args := []string{sub, "-api", url}
		if auth {
			args = append(args, "-token-file", tok)
		}
		var out bytes.Buffer
		err := Commands()["lb"].Run(context.Background(), testEnv(&out), append(args, rest...))
		return out.String(), err
	}

	out, err := run(true, "add", "tcp/198.18.1.1:80", "198.18.2.2:8080", "198.18.2.3:8080")
	assert.NoError(t, err, "lb add")
	assert.Contains(t, out, "198.18.2.1:8080, 198.18.2.2:8080, 198.18.2.3:8080", "lb add = %q, %v; want the three backends listed", out, err)
	out, err = run(true, "drain", "tcp/198.18.1.1:80", "198.18.2.1:8080")
	assert.NoError(t, err, "lb drain")
	assert.Contains(t, out, "198.18.2.1:8080 (draining)", "lb drain = %q, %v; want 198.18.2.1:8080 (draining)", out, err)
	_, err = run(true, "remove", "tcp/198.18.1.1:80", "198.18.2.1:8080")
	assert.NoError(t, err, "lb remove")
	out, err = run(false, "list", "-json")
	var r api.LBResponse
	assert.NoError(t, err, "lb list -json")
	if assert.NoError(t, json.Unmarshal([]byte(out), &r), "lb list -json = %q", out) && assert.Len(t, r.Services, 1, "lb list -json = %q; want one service with two backends", out) {
		assert.Len(t, r.Services[0].Backends, 2, "lb list -json = %q; want one service with two backends", out)
	}
	out, err = run(false, "list")
	assert.NoError(t, err, "lb list")
	assert.Contains(t, out, "tcp/198.18.1.1:80  random  198.18.2.2:8080, 198.18.2.3:8080", "lb list = %q, %v", out, err)
	// Refusals are errors naming the problem; a change needs the token.
	_, err = run(true, "add", "tcp/198.18.1.1:80", "198.18.2.2:8080")
	assert.ErrorContains(t, err, "400 Bad Request: service tcp/198.18.1.1:80: duplicate backend 198.18.2.2:8080", "lb add of a duplicate: %v, want a 400 naming it", err)
	_, err = run(false, "add", "tcp/198.18.1.1:80", "198.18.2.9:8080")
	assert.ErrorContains(t, err, "operator token", "lb add without a token: %v, want a refusal asking for the token", err)
}

// TestLBCLIServices runs `shield lb create|mode|replace|delete`: a whole
// service through the API, refusals naming every problem at once.
func TestLBCLIServices(t *testing.T) {
	testutil.Root(t)
	l, err := lb.Load(lb.Options{ReverseSize: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, url, tok := testService(t, l)
	run := func(sub string, rest ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := Commands()["lb"].Run(context.Background(), testEnv(&out), append([]string{sub, "-api", url, "-token-file", tok}, rest...))
		return out.String(), err
	}
	const svc = "udp/198.18.1.1:53"
	out, err := run("create", "-mode", "maglev", "-source-range", "198.18.0.0/24", "-affinity", "10m", svc, "198.18.2.1:53@3", "198.18.2.2:53")
	require.NoError(t, err)
	assert.Contains(t, out, "maglev (affinity 10m0s)")
	assert.Contains(t, out, "198.18.2.1:53@3, 198.18.2.2:53")
	assert.Contains(t, out, "198.18.0.0/24")
	k := lbconf.ServiceKey{VIP: netip.MustParseAddr("198.18.1.1"), Port: 53, Proto: lbconf.UDP}
	got, ok := l.Service(k)
	require.True(t, ok)
	assert.Equal(t, lbconf.Maglev, got.Mode)

	// Every problem of a bad create at once, and nothing created.
	_, err = run("create", "-mode", "fast", "-source-range", "198.18.0.1/24", "-affinity", "48h", "udp/198.18.1.9:53", "198.18.2.9:53@1000", "198.18.2.8:53")
	if assert.Error(t, err) {
		for _, want := range []string{"400 Bad Request", "fewer than 100", "did you mean 198.18.0.0/24", "unknown mode", "affinity timeout"} {
			assert.Contains(t, err.Error(), want, "a bad create names every problem")
		}
	}
	assert.Len(t, l.Services(), 1, "a refused create changed the services")

	out, err = run("mode", svc, "random")
	require.NoError(t, err)
	assert.Contains(t, out, "random (affinity 10m0s)")
	out, err = run("replace", "-drain", "198.18.2.2:53", svc, "198.18.2.2:53", "198.18.2.3:53@2")
	require.NoError(t, err)
	assert.Contains(t, out, "198.18.2.2:53 (draining), 198.18.2.3:53@2")
	assert.Contains(t, out, "any", "replace without -source-range: every client")
	_, err = run("create", svc, "198.18.2.1:53")
	assert.ErrorContains(t, err, "already exists")
	out, err = run("delete", svc)
	require.NoError(t, err)
	assert.Contains(t, out, "deleted "+svc)
	assert.Empty(t, l.Services())
	_, err = run("delete", svc)
	assert.ErrorContains(t, err, "unknown service")
}
