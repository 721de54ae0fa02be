package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/lb/cgroup2"
)

// TestServeLB runs `shield serve` with an [[lb.service]]: a process in the
// configured cgroup reaches a backend through the VIP and sees the VIP as
// its peer; the API lists the service and drains a backend away; /metrics
// counts the translations.
func TestServeLB(t *testing.T) {
	l := newLab(t, "lbsv")
	// Backends in the storm namespace answer "BACKEND-ADDR".
	lbResponders(t, l, "198.18.0.2:8080", "198.18.0.3:8080")
	mnt := t.TempDir()
	require.NoError(t, cgroup2.Mount(mnt))
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	cg := filepath.Join(mnt, fmt.Sprintf("xdps-lbsv-%d", os.Getpid()))
	t.Cleanup(func() { os.Remove(cg) })
	conf := filepath.Join(t.TempDir(), "shield.toml")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`[lb]
cgroup = %q
[[lb.service]]
vip = "198.18.0.100"
port = 80
mode = "maglev"
backends = ["198.18.0.2:8080", "198.18.0.3:8080"]
`, cg)), 0o600))
	s := l.serve(t, "-config", conf)
	s.waitLog(t, `msg="lb attached"`)

	// client runs one connect from a new process born in the cgroup.
	client := func() (backend, peer string) {
		t.Helper()
		d, err := os.Open(cg)
		require.NoError(t, err)
		defer d.Close()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envLBClient+"="+l.edge.Name+" 198.18.0.100:80")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		require.NoError(t, cmd.Run(), "client in %s: %s\nserve:\n%s", cg, &errb, s.out)
		f := strings.Fields(out.String())
		require.Len(t, f, 2, "client printed %q", out.String())
		return f[0], f[1]
	}
	be, peer := client()
	assert.Contains(t, []string{"198.18.0.2:8080", "198.18.0.3:8080"}, be, "connect to the VIP reached %s with getpeername %s, want a backend and the VIP", be, peer)
	assert.Equal(t, "198.18.0.100:80", peer, "connect to the VIP reached %s with getpeername %s, want a backend and the VIP", be, peer)

	ctx := context.Background()
	r, err := l.client.LB(ctx)
	require.NoError(t, err)
	if assert.Len(t, r.Services, 1, "GET /v1/lb = %+v, want the configured service with 1 translation", r) {
		assert.Equal(t, "tcp/198.18.0.100:80", r.Services[0].Service, "GET /v1/lb = %+v, want the configured service with 1 translation", r)
		assert.EqualValues(t, 1, r.Services[0].Translated, "GET /v1/lb = %+v, want the configured service with 1 translation", r)
	}
	_, err = l.client.LBChange(ctx, "drain", "tcp/198.18.0.100:80", []string{"198.18.0.2:8080"})
	require.NoError(t, err)
	for i := range 10 {
		be, _ := client()
		require.Equal(t, "198.18.0.3:8080", be, "connect %d after draining 198.18.0.2:8080 reached %s", i, be)
	}
	_, err = l.client.LBChange(ctx, "add", "tcp/198.18.0.100:80", []string{"198.18.0.2:8080", "198.18.0.2:8080"})
	assert.ErrorContains(t, err, "400", "add of a backend given twice: %v, want a 400", err)
	resp, err := l.client.HTTP.Get(l.client.Base + "/metrics")
	require.NoError(t, err)
	var text bytes.Buffer
	text.ReadFrom(resp.Body)
	resp.Body.Close()
	want := `shield_lb_calls_total{outcome="translated",service="tcp/198.18.0.100:80"} 11`
	assert.Contains(t, text.String(), want, "/metrics lacks %q", want)
}
