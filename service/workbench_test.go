package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/workbench"
)

// TestWorkbenchOff: without [workbench] the service serves exactly the
// API (every route, and the workbench's paths answer as any unknown path
// does); enabled, only the paths under workbench.Prefix change.
func TestWorkbenchOff(t *testing.T) {
	testutil.Root(t)
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-wb-%d", os.Getpid()))
	require.NoError(t, pinfs.EnsureBPFFS(dir))
	t.Cleanup(func() { os.RemoveAll(dir) })
	sh, err := shield.Load(shield.Options{TableSize: 4096, Clock: config.ClockVirtual, PinPath: dir})
	require.NoError(t, err)
	t.Cleanup(func() { sh.Close() })
	log := slog.New(slog.DiscardHandler)
	const token = "service-test-token-0123456789"
	srv := api.NewServer(sh, api.Options{Token: token, NoProcessMetrics: true, Logger: log})
	cfg := Config{API: API{Token: token}}

	// Every route the API serves, and the workbench's.
	reqs := []struct{ method, path, body string }{
		{"GET", "/v1/info", ""}, {"GET", "/v1/health", ""}, {"GET", "/v1/counters", ""},
		{"GET", "/v1/top", ""}, {"GET", "/v1/limits", ""}, {"PUT", "/v1/limits", "{}"},
		{"GET", "/v1/allow", ""}, {"POST", "/v1/allow", "{}"}, {"DELETE", "/v1/allow", "{}"},
		{"GET", "/v1/deny", ""}, {"POST", "/v1/deny", "{}"}, {"DELETE", "/v1/deny", "{}"},
		{"GET", "/nope", ""}, {"PATCH", "/v1/info", ""},
		{"GET", "/workbench/", ""}, {"GET", "/workbench/events", ""}, {"GET", "/workbench/session", ""},
		{"POST", "/workbench/signin", `{"token":"` + token + `"}`}, {"GET", "/workbench/static/app.js", ""},
	}
	answer := func(h http.Handler, method, path, body string) string {
		rec := httptest.NewRecorder()
		// The live stream ends with its request.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
		h.ServeHTTP(rec, req)
		res := rec.Result()
		b, _ := io.ReadAll(res.Body)
		if path == "/v1/info" || path == "/v1/top" { // uptime, a walk's time
			return fmt.Sprint(res.StatusCode)
		}
		return fmt.Sprintf("%d %v %s", res.StatusCode, res.Header, b)
	}
	off, _, _ := Handler(srv, sh, cfg, log)
	for _, r := range reqs {
		require.Equal(t, answer(srv, r.method, r.path, r.body), answer(off, r.method, r.path, r.body), "%s %s", r.method, r.path)
	}
	require.Contains(t, answer(off, "GET", "/workbench/", ""), "no such endpoint")

	cfg.Workbench.Enabled = true
	on, _, _ := Handler(srv, sh, cfg, log)
	for _, r := range reqs {
		same := answer(srv, r.method, r.path, r.body) == answer(on, r.method, r.path, r.body)
		require.Equal(t, !strings.HasPrefix(r.path, workbench.Prefix), same, "%s %s", r.method, r.path)
	}
}
