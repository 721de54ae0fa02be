package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/shield"
)

// TestLBCLI runs `shield lb list|add|drain|remove` against an in-process
// service with a balancer, as a table and with -json.
func TestLBCLI(t *testing.T) {
	testutil.Root(t)
	for _, k := range []string{envAPI, envToken, envTokenFile} {
		t.Setenv(k, "")
	}
	sh, err := shield.Load(shield.Options{TableSize: 4096, Clock: shield.ClockVirtual})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer sh.Close()
	l, err := lb.Load(lb.Options{ReverseSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k := lb.ServiceKey{VIP: netip.MustParseAddr("198.18.1.1"), Port: 80, Proto: lb.TCP}
	if err := l.AddService(lb.Service{ServiceKey: k, Mode: lb.Random, Backends: []lb.Backend{{Addr: netip.MustParseAddrPort("198.18.2.1:8080")}}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewServer(sh, api.Options{Token: testToken, NoProcessMetrics: true, LB: l,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer srv.Close()
	serveAdmin(t, srv.Config.Handler)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(auth bool, sub string, rest ...string) (string, error) {
		t.Helper()
		args := []string{sub, "-api", srv.URL}
		if auth {
			args = append(args, "-token-file", tok)
		}
		var out bytes.Buffer
		stdout = &out
		defer func() { stdout = os.Stdout }()
		err := commands["lb"].run(context.Background(), append(args, rest...))
		return out.String(), err
	}

	out, err := run(true, "add", "tcp/198.18.1.1:80", "198.18.2.2:8080", "198.18.2.3:8080")
	if err != nil || !strings.Contains(out, "198.18.2.1:8080, 198.18.2.2:8080, 198.18.2.3:8080") {
		t.Errorf("lb add = %q, %v; want the three backends listed", out, err)
	}
	out, err = run(true, "drain", "tcp/198.18.1.1:80", "198.18.2.1:8080")
	if err != nil || !strings.Contains(out, "198.18.2.1:8080 (draining)") {
		t.Errorf("lb drain = %q, %v; want 198.18.2.1:8080 (draining)", out, err)
	}
	if _, err := run(true, "remove", "tcp/198.18.1.1:80", "198.18.2.1:8080"); err != nil {
		t.Errorf("lb remove: %v", err)
	}
	out, err = run(false, "list", "-json")
	var r api.LBResponse
	if err != nil || json.Unmarshal([]byte(out), &r) != nil || len(r.Services) != 1 || len(r.Services[0].Backends) != 2 {
		t.Errorf("lb list -json = %q, %v; want one service with two backends", out, err)
	}
	out, err = run(false, "list")
	if err != nil || !strings.Contains(out, "tcp/198.18.1.1:80  random  198.18.2.2:8080, 198.18.2.3:8080") {
		t.Errorf("lb list = %q, %v", out, err)
	}
	// Refusals are errors naming the problem; a change needs the token.
	if _, err := run(true, "add", "tcp/198.18.1.1:80", "198.18.2.2:8080"); err == nil || !strings.Contains(err.Error(), "400 Bad Request: service tcp/198.18.1.1:80: duplicate backend 198.18.2.2:8080") {
		t.Errorf("lb add of a duplicate: %v, want a 400 naming it", err)
	}
	if _, err := run(false, "add", "tcp/198.18.1.1:80", "198.18.2.9:8080"); err == nil || !strings.Contains(err.Error(), "operator token") {
		t.Errorf("lb add without a token: %v, want a refusal asking for the token", err)
	}
}
