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

	tc "github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/vishvananda/netlink"

	"xdpshield/e2e"
	"xdpshield/internal/testutil"
	"xdpshield/internal/topo"
	"xdpshield/shield"
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
			t.Errorf("root network namespace changed:\n%s", diffLines(before, after))
		}
	})

	began := time.Now()
	d, err := StartDaemon(2 * time.Minute)
	if err != nil {
		testutil.SkipOrFail(t, "no Docker daemon for the container lane: "+err.Error())
	}
	t.Logf("dockerd up in %v (%s)", time.Since(began).Round(time.Millisecond), d.Dir)
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("stop dockerd: %v", err)
		}
		if _, err := os.Stat(d.Dir); !os.IsNotExist(err) {
			t.Errorf("daemon directory %s left behind (%v)", d.Dir, err)
		}
		for _, pat := range []string{"/sys/fs/cgroup/*/" + filepath.Base(d.Dir), "/sys/fs/cgroup/*/docker"} {
			if m, _ := filepath.Glob(pat); len(m) > 0 {
				t.Errorf("cgroups left behind: %v", m)
			}
		}
	})
	t.Setenv("DOCKER_HOST", d.Host())
	t.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	tclog.SetDefault(tclog.TestLogger(t)) // its progress lines in the test's log, shown with -v or on failure
	p, err := NewProvider()
	if err != nil {
		t.Fatalf("testcontainers provider: %v", err)
	}
	t.Cleanup(func() { p.Close() })

	bin, lab := buildStatic(t), buildStatic(t, "shieldlab")
	began = time.Now()
	if err := BuildImages(ctx, p, "Dockerfile", bin, lab); err != nil {
		t.Fatal(err)
	}
	t.Logf("images built in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := RemoveImages(context.Background(), p); err != nil {
			t.Errorf("remove images: %v", err)
		}
	})

	RemoveStalePinRoots()
	pinRoot := filepath.Join("/sys/fs/bpf", fmt.Sprintf("%s%d", LanePinPrefix, os.Getpid()))
	if err := shield.EnsureBPFFS(pinRoot); err != nil {
		t.Fatalf("pin root: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(pinRoot); err != nil {
			t.Errorf("remove pin root: %v", err)
		}
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
	if err != nil {
		t.Fatalf("edge container: %v", err)
	}
	ns, err := attach(ctx, "capedge", edge)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := topo.Veth(ns, e2e.EdgeDev, ns, "peer0"); err != nil {
		t.Fatal(err)
	}
	conf := t.TempDir()
	cfg := e2e.StormServiceConfig(e2e.ShortConfig(), "0123456789abcdef0123456789abcdef")
	if err := os.WriteFile(filepath.Join(conf, "shield.toml"), []byte(ShieldConfig(cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "token"), []byte(cfg.API.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer ns.Do(func() error { return shield.Detach(filepath.Join(pinRoot, "xdpshield"), e2e.EdgeDev) })

	// run starts a shield container with caps and returns its exit code
	// once it said it serves (serving: it is then stopped) or failed.
	run := func(caps []string, env map[string]string) (code int, serving bool, logs string) {
		t.Helper()
		w := wait.ForLog(`msg=serving|ERROR shield serve`).AsRegexp().WithStartupTimeout(time.Minute)
		c, err := Start(ctx, p, ShieldRequest(edge.GetContainerID(), pinRoot, conf, caps, env, w))
		if c != nil {
			defer c.Terminate(ctx)
		}
		if err != nil {
			t.Fatalf("shield container with %v: %v", caps, err)
		}
		logs = containerLogs(ctx, c)
		if strings.Contains(logs, "msg=serving") {
			return 0, true, logs
		}
		for range 100 {
			st, err := c.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Running {
				return st.ExitCode, false, containerLogs(ctx, c)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("shield container with %v logged an error and kept running:\n%s", caps, logs)
		return 0, false, logs
	}

	if _, serving, logs := run(ShieldCaps, nil); !serving {
		t.Fatalf("shield container with %v does not serve; logs:\n%s", ShieldCaps, logs)
	}
	t.Logf("with %v: serves", ShieldCaps)
	// Its pins are there: first a restart that would adopt them, then
	// (pins removed) a fresh start.
	for _, state := range []string{"adopting", "fresh"} {
		if state == "fresh" {
			if err := ns.Do(func() error { return shield.Detach(filepath.Join(pinRoot, "xdpshield"), e2e.EdgeDev) }); err != nil {
				t.Fatal(err)
			}
		}
		for _, miss := range ShieldCaps {
			rest := slices.DeleteFunc(slices.Clone(ShieldCaps), func(c string) bool { return c == miss })
			code, serving, logs := run(rest, nil)
			if serving || code == 0 || !strings.Contains(logs, miss) {
				t.Errorf("%s without %s: serving %v, exit %d, want a non-zero exit with a message naming it; logs:\n%s", state, miss, serving, code, logs)
			} else {
				t.Logf("%s without %s: exit %d: %s", state, miss, code, lastLine(logs))
			}
			code, serving, logs = run(rest, map[string]string{"SHIELD_NO_CAP_CHECK": "1"})
			if serving || code == 0 {
				t.Errorf("%s without %s and without the check: serving %v, exit %d, want the kernel's refusal; logs:\n%s", state, miss, serving, code, logs)
			} else {
				t.Logf("%s without %s, check off: exit %d: %s", state, miss, code, lastLine(logs))
			}
		}
	}
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
		if err := lane.Terminate(); err != nil {
			t.Errorf("remove containers: %v", err)
		}
	}()
	cfg.Deployment = lane
	res, err := e2e.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var b strings.Builder
	e2e.PrintTable(&b, res)
	t.Log(b.String())
	if out := os.Getenv("SHIELD_E2E_OUT"); out != "" {
		if err := e2e.WriteJSON(filepath.Join(out, "container-storm.json"), res); err != nil {
			t.Error(err)
		}
	}
	if !res.OK {
		t.Errorf("assertions failed:\n%s", strings.Join(res.Failed, "\n"))
	}
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
	if want := []string{"baseline", "few-sources", "many-forged", "recovery"}; !slices.Equal(names, want) {
		t.Errorf("ran phases %q, want %q", names, want)
	}
	if restarts != 1 {
		t.Errorf("%d phases restarted the shield, want 1", restarts)
	}
	var contrast []string
	for _, p := range res.Contrast {
		contrast = append(contrast, p.Name)
		if !checked(p, e2e.HarmCheck) {
			t.Errorf("contrast %s: the storm did not break the budget of an unprotected edge", p.Name)
		}
	}
	if want := []string{"no-shield/few-sources", "no-shield/many-forged"}; !slices.Equal(contrast, want) {
		t.Errorf("ran contrast phases %q, want %q", contrast, want)
	}
	m, _ := filepath.Glob(fmt.Sprintf("/run/netns/%s*-%d", topo.Prefix, os.Getpid()))
	if len(m) > 0 {
		t.Errorf("namespace names left behind: %v", m)
	}
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
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build static %s: %v\n%s", cmdName, err, b)
	}
	return out
}

// rootState is what the lane must not change in the root network
// namespace: links (name, kind, flags), addresses, routes of every table,
// iptables, ip6tables and nftables rules, and the forwarding sysctls.
func rootState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatalf("list links: %v", err)
	}
	for _, l := range links {
		a := l.Attrs()
		fmt.Fprintf(&b, "link %d %s %s %v master=%d\n", a.Index, a.Name, l.Type(), a.Flags, a.MasterIndex)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("list addresses: %v", err)
	}
	for _, a := range addrs {
		fmt.Fprintf(&b, "addr %d %s\n", a.LinkIndex, a.IPNet)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("list routes: %v", err)
	}
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
