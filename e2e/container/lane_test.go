package container

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tc "github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/vishvananda/netlink"

	"github.com/xdpshield/xdpshield/e2e"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// TestContainerLane starts its own Docker daemon, builds the three images
// FROM scratch, proves the shield container's capability list (enough, and
// each one needed), runs the storm with every part in a container (the same
// phases and assertions as e2e.TestScenario, the shield restarted
// mid-storm), and leaves the root network namespace as it found it.
func TestContainerLane(t *testing.T) {
	if testutil.InVM() {
		t.Skip("runs on the host only: the VM matrix's initramfs has no Docker engine, setpriv or go toolchain")
	}
	testutil.Root(t)
	ctx := context.Background()
	before := rootState(t)
	t.Cleanup(func() {
		if after := rootState(t); after != before {
			assert.Failf(t, "root network namespace changed", "%s", diffLines(before, after))
		}
	})

	began := time.Now()
	d, err := StartDaemon(2 * time.Minute)
	if err != nil {
		testutil.SkipOrFail(t, "no Docker daemon for the container lane: "+err.Error())
	}
	t.Logf("dockerd up in %v (%s)", time.Since(began).Round(time.Millisecond), d.Dir)
	t.Cleanup(func() {
		assert.NoError(t, d.Close(), "stop dockerd")
		_, err := os.Stat(d.Dir)
		assert.True(t, os.IsNotExist(err), "daemon directory %s left behind (%v)", d.Dir, err)
		for _, pat := range []string{"/sys/fs/cgroup/*/" + filepath.Base(d.Dir), "/sys/fs/cgroup/*/docker"} {
			m, _ := filepath.Glob(pat)
			assert.Empty(t, m, "cgroups left behind")
		}
	})
	t.Setenv("DOCKER_HOST", d.Host())
	t.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	tclog.SetDefault(tclog.TestLogger(t)) // its progress lines in the test's log, shown with -v or on failure
	p, err := NewProvider()
	require.NoError(t, err, "testcontainers provider")
	t.Cleanup(func() { p.Close() })

	bin, lab := buildStatic(t), buildStatic(t, "shieldlab")
	began = time.Now()
	require.NoError(t, BuildImages(ctx, p, "Dockerfile", bin, lab))
	t.Logf("images built in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		assert.NoError(t, RemoveImages(context.Background(), p), "remove images")
	})

	RemoveStalePinRoots()
	pinRoot := filepath.Join("/sys/fs/bpf", fmt.Sprintf("%s%d", LanePinPrefix, os.Getpid()))
	require.NoError(t, pinfs.EnsureBPFFS(pinRoot), "pin root")
	t.Cleanup(func() {
		assert.NoError(t, os.RemoveAll(pinRoot), "remove pin root")
	})

	t.Run("capabilities", func(t *testing.T) { testCapabilities(t, p, pinRoot) })
	t.Run("storm", func(t *testing.T) { testStorm(t, p, pinRoot) })
}

// testCapabilities runs the shield container on a veth in an edge container
// with the documented set (it serves), and with each capability of it
// missing (it exits non-zero naming the capability; and, with the check
// switched off, the kernel itself refuses: the capability is needed, not
// only asked for).
func testCapabilities(t *testing.T, p *tc.DockerProvider, pinRoot string) {
	ctx := context.Background()
	dir := t.TempDir()
	edge, err := Start(ctx, p, agentRequest(ImageEdge, dir, nil))
	if edge != nil {
		defer edge.Terminate(ctx)
	}
	require.NoError(t, err, "edge container")
	ns, err := attach(ctx, "capedge", edge)
	require.NoError(t, err)
	defer ns.Close()
	require.NoError(t, topo.Veth(ns, storm.EdgeDev, ns, "peer0"))
	conf := t.TempDir()
	cfg := e2e.StormServiceConfig(e2e.ShortConfig(), "0123456789abcdef0123456789abcdef")
	require.NoError(t, os.WriteFile(filepath.Join(conf, "shield.toml"), []byte(ShieldConfig(cfg)), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(conf, "token"), []byte(cfg.API.Token+"\n"), 0o600))
	defer ns.Do(func() error { return pin.Detach(filepath.Join(pinRoot, "xdpshield"), storm.EdgeDev) })

	// run starts a shield container with caps and returns its exit code
	// once it said it serves (serving: it is then stopped) or failed.
	run := func(caps []string, env map[string]string) (code int, serving bool, logs string) {
		t.Helper()
		w := wait.ForLog(`msg=serving|ERROR shield serve|msg="shield serve"`).AsRegexp().WithStartupTimeout(time.Minute)
		c, err := Start(ctx, p, ShieldRequest(edge.GetContainerID(), pinRoot, conf, caps, env, w))
		if c != nil {
			defer c.Terminate(ctx)
		}
		require.NoError(t, err, "shield container with %v", caps)
		logs = containerLogs(ctx, c)
		if strings.Contains(logs, "msg=serving") {
			return 0, true, logs
		}
		for range 100 {
			st, err := c.State(ctx)
			require.NoError(t, err)
			if !st.Running {
				return st.ExitCode, false, containerLogs(ctx, c)
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.FailNowf(t, "an error and still running", "shield container with %v logged an error and kept running:\n%s", caps, logs)
		return 0, false, logs
	}

	_, serving, logs := run(ShieldCaps, nil)
	require.True(t, serving, "shield container with %v does not serve; logs:\n%s", ShieldCaps, logs)
	t.Logf("with %v: serves", ShieldCaps)
	testHealthcheck(t, p, edge.GetContainerID(), pinRoot, conf)
	// Its pins are there: first a restart that would adopt them, then
	// (pins removed) a fresh start.
	for _, state := range []string{"adopting", "fresh"} {
		if state == "fresh" {
			require.NoError(t, ns.Do(func() error { return pin.Detach(filepath.Join(pinRoot, "xdpshield"), storm.EdgeDev) }))
		}
		for _, miss := range ShieldCaps {
			rest := slices.DeleteFunc(slices.Clone(ShieldCaps), func(c string) bool { return c == miss })
			code, serving, logs := run(rest, nil)
			if assert.True(t, !serving && code != 0 && strings.Contains(logs, miss), "%s without %s: serving %v, exit %d, want a non-zero exit with a message naming it; logs:\n%s", state, miss, serving, code, logs) {
				t.Logf("%s without %s: exit %d: %s", state, miss, code, lastLine(logs))
			}
			code, serving, logs = run(rest, map[string]string{"SHIELD_NO_CAP_CHECK": "1"})
			if assert.True(t, !serving && code != 0, "%s without %s and without the check: serving %v, exit %d, want the kernel's refusal; logs:\n%s", state, miss, serving, code, logs) {
				t.Logf("%s without %s, check off: exit %d: %s", state, miss, code, lastLine(logs))
			}
		}
	}
}

// testHealthcheck: the image's HEALTHCHECK (`shield health` through the
// admin socket) reports a serving shield container healthy. The lane's
// configuration has reads need the token (api.auth_reads): the
// container's environment names its file for the check, as
// docs/container.md says.
func testHealthcheck(t *testing.T, p *tc.DockerProvider, edgeID, pinRoot, conf string) {
	ctx := context.Background()
	env := map[string]string{"SHIELD_TOKEN_FILE": "/etc/xdpshield/token"}
	c, err := Start(ctx, p, ShieldRequest(edgeID, pinRoot, conf, ShieldCaps, env,
		wait.ForLog("msg=serving").WithStartupTimeout(time.Minute)))
	if c != nil {
		defer c.Terminate(ctx)
	}
	require.NoError(t, err, "shield container")
	began := time.Now()
	status := ""
	for time.Since(began) < 40*time.Second {
		in, err := c.Inspect(ctx)
		require.NoError(t, err)
		require.NotNil(t, in.State.Health, "the image has no HEALTHCHECK")
		if status = string(in.State.Health.Status); status == "healthy" {
			t.Logf("healthy %v after serving", time.Since(began).Round(time.Second))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	in, _ := c.Inspect(ctx)
	var last string
	if in != nil && in.State.Health != nil && len(in.State.Health.Log) > 0 {
		last = in.State.Health.Log[len(in.State.Health.Log)-1].Output
	}
	require.Failf(t, "not healthy", "health %q 40 s after serving; last check: %s\nlogs:\n%s", status, last, containerLogs(ctx, c))
}

func testStorm(t *testing.T, p *tc.DockerProvider, pinRoot string) {
	cfg := e2e.DefaultConfig()
	cfg.PhaseDuration = 5 * time.Second
	cfg.Settle = 500 * time.Millisecond
	cfg.Budget.P99Ratio = 8 // as e2e.TestScenario: 5 s phases
	if testing.Short() {
		cfg = e2e.ShortConfig()
	}
	lane := &Lane{Provider: p, Dir: t.TempDir(), PinRoot: pinRoot, Logf: t.Logf}
	defer func() {
		assert.NoError(t, lane.Terminate(), "remove containers")
	}()
	cfg.Deployment = lane
	res, err := e2e.Run(context.Background(), cfg)
	require.NoError(t, err, "Run")
	var b strings.Builder
	e2e.PrintTable(&b, res)
	t.Log(b.String())
	if out := os.Getenv("SHIELD_E2E_OUT"); out != "" {
		assert.NoError(t, e2e.WriteJSON(filepath.Join(out, "container-storm.json"), res))
	}
	assert.True(t, res.OK, "assertions failed:\n%s", strings.Join(res.Failed, "\n"))
	var names []string
	restarts := 0
	for _, p := range res.Phases {
		names = append(names, p.Name)
		if p.Restart != nil {
			restarts++
			t.Logf("%s: shield restarted, %.0f ms without a service, %d drops meanwhile, link %d -> %d, %s",
				p.Name, p.Restart.DownMs, p.Restart.DropsDown, p.Restart.LinkBefore, p.Restart.LinkAfter, p.Restart.AdoptedNote)
		}
	}
	assert.Equal(t, []string{"baseline", "few-sources", "many-forged", "recovery"}, names, "ran phases")
	assert.Equal(t, 1, restarts, "phases that restarted the shield")
	var contrast []string
	for _, p := range res.Contrast {
		contrast = append(contrast, p.Name)
		assert.True(t, checked(p, e2e.HarmCheck), "contrast %s: the storm did not break the budget of an unprotected edge", p.Name)
	}
	assert.Equal(t, []string{"no-shield/few-sources", "no-shield/many-forged"}, contrast, "ran contrast phases")
	m, _ := filepath.Glob(fmt.Sprintf("/run/netns/%s*-%d", topo.Prefix, os.Getpid()))
	assert.Empty(t, m, "namespace names left behind")
}

func checked(ph *e2e.Phase, name string) bool {
	for _, c := range ph.Checks {
		if c.Name == name {
			return c.OK
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// buildStatic builds the shield binary, or the command of cmd/ named by
// name (shieldlab), with CGO_ENABLED=0 (what FROM scratch can run).
func buildStatic(t *testing.T, name ...string) string {
	t.Helper()
	cmdName := "shield"
	if len(name) > 0 {
		cmdName = name[0]
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go" // where the README puts it; .ci/run adds it to PATH
	}
	out := filepath.Join(t.TempDir(), cmdName)
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", out, "./cmd/"+cmdName)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "build static %s:\n%s", cmdName, b)

	return out
}

// rootState is what the lane must not change in the root network
// namespace: links (name, kind, flags), addresses, routes of every table,
// iptables, ip6tables and nftables rules, and the forwarding sysctls.
func rootState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	links, err := netlink.LinkList()
	require.NoError(t, err, "list links")
	for _, l := range links {
		a := l.Attrs()
		fmt.Fprintf(&b, "link %d %s %s %v master=%d\n", a.Index, a.Name, l.Type(), a.Flags, a.MasterIndex)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	require.NoError(t, err, "list addresses")
	for _, a := range addrs {
		fmt.Fprintf(&b, "addr %d %s\n", a.LinkIndex, a.IPNet)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	require.NoError(t, err, "list routes")
	for _, r := range routes {
		fmt.Fprintf(&b, "route table %d %s\n", r.Table, r)
	}
	rules, err := netlink.RuleList(netlink.FAMILY_ALL)
	if err == nil {
		for _, r := range rules {
			fmt.Fprintf(&b, "rule %s\n", r)
		}
	}
	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"}} {
		out, err := exec.Command(cmd[0], cmd[1:]...).Output()
		if err != nil {
			fmt.Fprintf(&b, "%s: unavailable (%v)\n", cmd[0], err)
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "#") {
				continue // "Generated by ... on DATE"
			}
			l = counters.ReplaceAllString(l, "")
			fmt.Fprintf(&b, "%s: %s\n", cmd[0], l)
		}
	}
	for _, s := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		v, _ := os.ReadFile("/proc/sys/" + s)
		fmt.Fprintf(&b, "sysctl %s = %s\n", s, strings.TrimSpace(string(v)))
	}
	return b.String()
}

// counters matches the packet and byte counts of a rule or chain, which
// traffic changes.
var counters = regexp.MustCompile(`\[\d+:\d+\]|counter packets \d+ bytes \d+`)

// diffLines lists the lines only in a (-) and only in b (+).
func diffLines(a, b string) string {
	as, bs := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range as {
		if !slices.Contains(bs, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bs {
		if !slices.Contains(as, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
