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
	if err := cgroup2.Mount(mnt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	cg := filepath.Join(mnt, fmt.Sprintf("xdps-lbsv-%d", os.Getpid()))
	t.Cleanup(func() { os.Remove(cg) })
	conf := filepath.Join(t.TempDir(), "shield.toml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`[lb]
cgroup = %q
[[lb.service]]
vip = "198.18.0.100"
port = 80
mode = "maglev"
backends = ["198.18.0.2:8080", "198.18.0.3:8080"]
`, cg)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := l.serve(t, "-config", conf)
	s.waitLog(t, `msg="lb attached"`)

	// client runs one connect from a new process born in the cgroup.
	client := func() (backend, peer string) {
		t.Helper()
		d, err := os.Open(cg)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envLBClient+"="+l.edge.Name+" 198.18.0.100:80")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("client in %s: %v: %s\nserve:\n%s", cg, err, errb.String(), s.out)
		}
		f := strings.Fields(out.String())
		if len(f) != 2 {
			t.Fatalf("client printed %q", out.String())
		}
		return f[0], f[1]
	}
	be, peer := client()
	if (be != "198.18.0.2:8080" && be != "198.18.0.3:8080") || peer != "198.18.0.100:80" {
		t.Errorf("connect to the VIP reached %s with getpeername %s, want a backend and the VIP", be, peer)
	}

	ctx := context.Background()
	r, err := l.client.LB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Services) != 1 || r.Services[0].Service != "tcp/198.18.0.100:80" || r.Services[0].Translated != 1 {
		t.Errorf("GET /v1/lb = %+v, want the configured service with 1 translation", r)
	}
	if _, err := l.client.LBChange(ctx, "drain", "tcp/198.18.0.100:80", []string{"198.18.0.2:8080"}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if be, _ := client(); be != "198.18.0.3:8080" {
			t.Fatalf("connect %d after draining 198.18.0.2:8080 reached %s", i, be)
		}
	}
	if _, err := l.client.LBChange(ctx, "add", "tcp/198.18.0.100:80", []string{"198.18.0.2:8080", "198.18.0.2:8080"}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("add of a backend given twice: %v, want a 400", err)
	}
	resp, err := l.client.HTTP.Get(l.client.Base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	text.ReadFrom(resp.Body)
	resp.Body.Close()
	if want := `shield_lb_calls_total{outcome="translated",service="tcp/198.18.0.100:80"} 11`; !strings.Contains(text.String(), want) {
		t.Errorf("/metrics lacks %q", want)
	}
}
