package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/lb/cgroup2"
)

// TestAlertRules: dist/prometheus's rules pass `promtool check rules`, and
// their test series (each alert firing where it should, and not for a
// steady flood, an sk_storage balancer or a brief burst) pass `promtool
// test rules`.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool (Debian package prometheus; ci/deps.sh installs it)")
	for _, args := range [][]string{{"check", "rules", "shield.rules.yml"}, {"test", "rules", "shield.rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "../../dist/prometheus"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// dashboardExprs are the queries of dist/grafana/shield.json's panels,
// with Grafana's variables given values Prometheus understands.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../dist/grafana/shield.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	r := strings.NewReplacer("$__rate_interval", "10s", "$instance", ".+")
	exprs := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			exprs[fmt.Sprintf("%s [%d]", p.Title, i)] = r.Replace(tg.Expr)
		}
	}
	return exprs
}

// TestDashboardQueries runs a real Prometheus (Debian's prometheus, on
// the edge namespace's loopback, storage in a temporary directory) that
// scrapes a real `shield serve` with a socket balancer and an L7 proxy
// (and loads the alerting rules); every query of the Grafana dashboard
// returns data once a few requests went through the proxy.
func TestDashboardQueries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Prometheus and serve (-short)")
	}
	prom, err := exec.LookPath("prometheus")
	require.NoError(t, err, "prometheus (Debian package prometheus; ci/deps.sh installs it)")
	exprs := dashboardExprs(t)
	require.NotEmpty(t, exprs)

	l := newLab(t, "dash")
	l.l7Backend(t, "198.18.0.1:9001")
	mnt := t.TempDir()
	require.NoError(t, cgroup2.Mount(mnt))
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	cg := filepath.Join(mnt, fmt.Sprintf("xdps-dash-%d", os.Getpid()))
	t.Cleanup(func() { os.Remove(cg) })
	dir := t.TempDir()
	conf := filepath.Join(dir, "shield.toml")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`[lb]
cgroup = %q
[[lb.service]]
vip = "198.18.0.100"
port = 80
backends = ["198.18.0.2:8080", "198.18.0.3:8080"]
[l7]
listen = "198.18.0.1:80"
[[l7.route]]
name = "app"
path_prefix = "/app"
backends = ["198.18.0.1:9001"]
[[l7.rbac]]
name = "no-admin"
action = "deny"
path_prefix = "/app/admin"
`, cg)), 0o600))
	s := l.serve(t, "-config", conf)
	s.waitLog(t, `msg="lb attached"`)

	rules, err := filepath.Abs("../../dist/prometheus/shield.rules.yml")
	require.NoError(t, err)
	promConf := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(promConf, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: shield
    static_configs:
      - targets: [%q]
`, rules, api.DefaultListen)), 0o644))
	const promAddr = "127.0.0.1:9490"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := l.edge.Command(prom, "--config.file="+promConf, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", out)
		}
	})

	// Traffic for the L7 panels: served, denied, no route.
	c := l.l7Client(t, "198.18.0.2")
	for _, p := range []string{"/app/a", "/app/b", "/app/admin/x", "/other"} {
		resp, err := c.Get("http://198.18.0.1" + p)
		require.NoError(t, err, "GET %s", p)
		resp.Body.Close()
	}

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, n, addr string) (net.Conn, error) {
		var conn net.Conn
		err := l.edge.Do(func() (err error) {
			conn, err = (&net.Dialer{}).DialContext(ctx, n, addr)
			return err
		})
		return conn, err
	}}}
	query := func(q string) (int, error) {
		resp, err := hc.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s: %s", r.Status, r.Error)
		}
		return len(r.Data.Result), nil
	}
	// Five scrapes of serve, so that every rate over 10 s has two samples.
	for {
		n, err := query(`count_over_time(up{job="shield"}[1m]) >= 5 and up{job="shield"} == 1`)
		if err == nil && n == 1 {
			break
		}
		if ctx.Err() != nil {
			var targets string
			if resp, err := hc.Get("http://" + promAddr + "/api/v1/targets"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				targets = string(b)
			}
			require.Fail(t, fmt.Sprintf("Prometheus did not scrape serve 5 times within 30 s (last: %d series, %v); targets: %s", n, err, targets))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for name, q := range exprs {
		n, err := query(q)
		if assert.NoError(t, err, "%s: %s", name, q) {
			assert.NotZero(t, n, "%s: %s returned no series", name, q)
		}
	}
	n, err := query(`ALERTS`)
	require.NoError(t, err)
	t.Logf("%d dashboard queries answered; %d alert series (rules loaded)", len(exprs), n)
}
