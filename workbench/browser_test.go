package workbench_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	svc "github.com/xdpshield/xdpshield/service"
	"github.com/xdpshield/xdpshield/shield/pin"
	"github.com/xdpshield/xdpshield/workbench"
)

const browserToken = "browser-test-token-0123456789"

// TestBrowser drives headless Chromium against the service's own wiring
// (service.Start, as `shield serve` runs it) with the workbench enabled,
// in namespaces of its own: the page loads without console errors, the
// counters move when frames arrive, the read-only view cannot start a
// storm, a wrong token is refused and the right one signs in (by
// keyboard), a change without the CSRF token is refused, and a short
// storm (the lab's binary, built here) started from the page shows its
// phases and its drops rising. Screenshots go to $TMPDIR/xdpshield-
// workbench (and docs/workbench.png with WORKBENCH_DOCS=1).
func TestBrowser(t *testing.T) {
	testutil.Root(t)
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		testutil.SkipOrFail(t, "no chromium (ci/deps.sh installs it)")
	}
	// The storm: a stand-in printing what `shieldlab storm
	// -progress-json` prints (e2e.TestProgressJSON holds the two to one
	// format), so that beside other packages' tests it waits for no
	// storm lock (the study's tests take it); with WORKBENCH_REAL_STORM=1
	// the lab's own binary, built here: `make test-storm` runs it so,
	// alone, after the storms (CI does).
	lab := filepath.Join(t.TempDir(), "shieldlab")
	if os.Getenv("WORKBENCH_REAL_STORM") == "1" {
		build := exec.Command("go", "build", "-o", lab, "../cmd/shieldlab")
		build.Stderr = os.Stderr
		require.NoError(t, build.Run(), "build shieldlab")
	}
	lock := ""
	if os.Getenv("WORKBENCH_REAL_STORM") != "1" {
		require.NoError(t, os.WriteFile(lab, []byte(standInStorm), 0o755))
		lock = filepath.Join(t.TempDir(), "storm.lock")
	}

	a, err := topo.New("wb-a")
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	b, err := topo.New("wb-b")
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	require.NoError(t, topo.Veth(a, "wba", b, "wbb"))
	require.NoError(t, a.AddAddr("wba", "198.18.200.1/24"))
	require.NoError(t, b.AddAddr("wbb", "198.18.200.2/24"))
	root := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-workbench-%d", os.Getpid()))
	require.NoError(t, pinfs.EnsureBPFFS(root))
	t.Cleanup(func() {
		a.Do(func() error { return pin.Detach(root, "wba") })
		os.RemoveAll(root)
	})
	cfg := svc.Config{Iface: "wba", PinRoot: root, TableSize: 4096,
		API: svc.API{Listen: "127.0.0.1:0", Token: browserToken, NoProcessMetrics: true},
		Workbench: svc.Workbench{Enabled: true, Config: workbench.Config{Interval: 500 * time.Millisecond,
			Storm: workbench.StormConfig{Binary: lab, LockPath: lock, PerHour: 2, Phase: 2 * time.Second, Timeout: 2 * time.Minute}}}}
	var s *svc.Service
	require.NoError(t, a.Do(func() error {
		var err error
		s, err = svc.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		return err
	}))
	t.Cleanup(func() { s.Close() })
	base := "http://" + proxy(t, a, s.Addr().String()) + workbench.Prefix

	ctx, cancel := browser(t, chrome, 1280, 800)
	defer cancel()
	var mu sync.Mutex
	var consoleErrs []string
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException || m.Type == "error" {
				mu.Lock()
				consoleErrs = append(consoleErrs, m.String()+" "+m.URL)
				mu.Unlock()
			}
		}
	}()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base)))
	waitJS(t, ctx, `document.getElementById("live").textContent.startsWith("live")`)

	// Frames from the other namespace move the counters on the page.
	total := func() int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(+document.getElementById("total-pass").textContent || 0) + (+document.getElementById("total-drop").textContent || 0)`))
		require.NoError(t, err)
		return n
	}
	before := total()
	send := func() {
		require.NoError(t, b.Do(func() error {
			c, err := net.Dial("udp", "198.18.200.1:9")
			if err != nil {
				return err
			}
			defer c.Close()
			for range 50 {
				c.Write([]byte("workbench"))
			}
			return nil
		}))
	}
	// 50 frames every 200 ms (the first wait for ARP), at most 5 s.
	require.Eventually(t, func() bool { send(); return total() >= before+100 }, 5*time.Second, 200*time.Millisecond, "counters on the page")
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	require.Empty(t, consoleErrs, "console errors while loading")
	mu.Unlock()
	shot(t, ctx, "readonly")

	// Read-only: the button is disabled, and the page's own request is
	// refused.
	require.True(t, evalBool(t, ctx, `document.getElementById("storm-start").disabled`), "storm button in the read-only view")
	require.Equal(t, 401, post(t, ctx, "storm", false))

	// A wrong token is refused; the right one signs in, by keyboard
	// (Enter in the field submits the form).
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("signin-token"), "not-the-token-000000\r")))
	waitJS(t, ctx, `document.getElementById("signin-msg").textContent.includes("refused")`)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("signin-token"), browserToken+"\r")))
	waitJS(t, ctx, `!document.getElementById("signedin").hidden && document.getElementById("session-text").textContent.includes("signed in")`)
	waitJS(t, ctx, `!document.getElementById("storm-start").disabled`)

	// A change without the CSRF token is refused; with it, it is read.
	require.Equal(t, 403, post(t, ctx, "storm", false))
	require.Equal(t, 400, post(t, ctx, "storm", true), "with the token: an empty scenario")

	// A short storm from the page: its phases, and the drops rising.
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("storm-scenario"), "few"),
		chromedp.Click(chromedp.ID("storm-start"))))
	var baseDrop, maxDrop float64
	shotTaken := false
	deadline := time.Now().Add(2 * time.Minute)
	type view struct {
		Phases []string `json:"phases"`
		Drop   string   `json:"drop"`
		Msg    string   `json:"msg"`
	}
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[view](`({phases: [...document.querySelectorAll("#storm-phases li")].map(e => e.textContent),
			drop: document.getElementById("storm-drop").textContent, msg: document.getElementById("storm-msg").textContent})`))
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "the storm did not end on the page: %+v", v)
		require.NotContains(t, v.Msg, "refused")
		d := parseHuman(v.Drop)
		if n := len(v.Phases); n > 0 && v.Phases[n-1] == "baseline" {
			baseDrop = max(baseDrop, d)
		}
		if n := len(v.Phases); n > 0 && v.Phases[n-1] == "few-sources" {
			maxDrop = max(maxDrop, d)
			if d > 0 && !shotTaken {
				time.Sleep(time.Second)
				shot(t, ctx, "storm")
				shotTaken = true
			}
		}
		if strings.HasPrefix(v.Msg, "Storm over") {
			assert.Equal(t, []string{"baseline", "few-sources", "recovery"}, v.Phases)
			t.Logf("storm: %s", v.Msg)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("storm drops on the page: baseline %.0f pps, few-sources up to %.0f pps", baseDrop, maxDrop)
	require.Greater(t, maxDrop, baseDrop+100, "drops rise in the few-sources phase")
	require.False(t, evalBool(t, ctx, `document.getElementById("result-link").hidden`), "the final table is offered")

	// A phone-sized window: nothing wider than the screen.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)))
	time.Sleep(time.Second) // the charts redraw at the next sample
	wider := evalBool(t, ctx, `document.documentElement.scrollWidth > window.innerWidth`)
	assert.False(t, wider, "horizontal scrolling at phone width")
	shot(t, ctx, "phone")
}

func evalBool(t *testing.T, ctx context.Context, js string) bool {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
	require.NoError(t, err, js)
	return v
}

func waitJS(t *testing.T, ctx context.Context, js string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		return err == nil && v
	}, 10*time.Second, 100*time.Millisecond, js)
}

// standInStorm prints a storm's progress lines: a quiet baseline, drops
// rising under the few-sources storm, a recovery; then its -json file.
const standInStorm = `#!/bin/sh
out=""
while [ $# -gt 0 ]; do [ "$1" = "-json" ] && out="$2"; shift; done
line() {
  echo "{\"phase\":\"$1\",\"shield\":true,\"elapsed_seconds\":$2,\"length_seconds\":2,\"sent_pps\":$3,\"pass_pps\":20,\"drop_pps\":{\"limit\":$3},\"p50_ms\":{\"keep_alive\":0.4,\"new_conn\":2.5,\"udp\":0.2},\"p99_ms\":{\"keep_alive\":$4,\"new_conn\":4,\"udp\":0.8},\"requests\":20,\"failures\":0,\"api_ok\":true,\"sources\":5}"
  sleep 0.5
}
line baseline 0.5 0 0.8; line baseline 1 0 0.9; line baseline 1.5 0 0.8; line baseline 2 0 0.9
line few-sources 0.5 1500 0.9; line few-sources 1 4000 1.1; line few-sources 1.5 4700 1.0; line few-sources 2 4800 1.2
line recovery 0.5 0 0.8; line recovery 1 0 0.8
echo '{"ok":true,"failed":[],"phases":[{"name":"baseline"},{"name":"few-sources"},{"name":"recovery"}]}' > "$out"
`

// proxy forwards a loopback port of this namespace to addr in ns (where
// the service listens), for the browser.
func proxy(t *testing.T, ns *topo.NS, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var up net.Conn
			if err := ns.Do(func() error {
				var err error
				up, err = net.Dial("tcp", addr)
				return err
			}); err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func browser(t *testing.T, chrome string, w, h int) (context.Context, context.CancelFunc) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.WindowSize(w, h), chromedp.Flag("headless", "new"))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
	return ctx, func() { tcancel(); cancel(); acancel() }
}

// post sends POST Prefix+path from the page, with or without the page's
// CSRF token, and returns the status.
func post(t *testing.T, ctx context.Context, path string, csrf bool) int {
	t.Helper()
	js := fmt.Sprintf(`(async () => {
		const s = await (await fetch("session")).json();
		const h = {"Content-Type": "application/json"};
		if (%t && s.csrf) h["X-CSRF-Token"] = s.csrf;
		return (await fetch(%q, {method: "POST", headers: h, body: "{}"})).status;
	})()`, csrf, path)
	code, err := chromedp.Run(ctx, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	return code
}

func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	dir := filepath.Join(os.TempDir(), "xdpshield-workbench")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	p := filepath.Join(dir, name+".png")
	require.NoError(t, os.WriteFile(p, png, 0o644))
	t.Logf("screenshot %s", p)
	if name == "storm" && os.Getenv("WORKBENCH_DOCS") == "1" {
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "workbench.png"), png, 0o644))
	}
}

// parseHuman reads the page's numbers (1.5k, 2.00M).
func parseHuman(s string) float64 {
	m := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		m, s = 1e3, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		m, s = 1e6, strings.TrimSuffix(s, "M")
	}
	v, _ := strconv.ParseFloat(s, 64)
	return v * m
}
