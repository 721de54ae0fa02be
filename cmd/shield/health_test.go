package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/cli"
)

// TestHealthCommand: `shield health` (a container's HEALTHCHECK) exits 0
// while the API says healthy, 1 naming the problem when it answers 503,
// and 1 when nothing answers.
func TestHealthCommand(t *testing.T) {
	healthy := true
	// The CLI speaks to a local service through its admin socket only.
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if healthy {
			w.Write([]byte(`{"healthy":true}`))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"healthy":false,"problem":"interface eth0 is gone"}`))
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	health := func() (int, string) {
		var out, errw bytes.Buffer
		code := run(context.Background(), []string{"health", "-admin-socket", sock}, &out, &errw)
		return code, out.String() + errw.String()
	}
	code, out := health()
	assert.Equal(t, cli.ExitOK, code, out)
	assert.Contains(t, out, "healthy")
	healthy = false
	code, out = health()
	assert.Equal(t, cli.ExitRuntime, code, out)
	assert.Contains(t, out, "NOT PROTECTING: interface eth0 is gone")
	srv.Close()
	code, out = health()
	assert.Equal(t, cli.ExitRuntime, code, out)
	assert.Contains(t, out, "unhealthy")
}
