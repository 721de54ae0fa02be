package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// scenarioConfig is the storm TestScenario and TestScenarioDryRun run:
// the demo's with 5 s phases, or with -short (the VM matrix, on emulated
// CPUs) ShortConfig.
//
// ShortConfig uses the AF_PACKET generator on every kernel (so the matrix
// runs the fallback's scenario too). Multi-threaded TCG mishandles kernel
// text patching: a 7.2 guest oopsed on an int3 left in
// bpf_dispatcher_xdp_func, which every live-frames run repatches twice while
// the shield runs through it on the other vCPU (and once in cookie_hash, a
// static key the SYN flood flips); AF_PACKET spares it hundreds of patches a
// second. The live-frames generator keeps its own tests there (e2e/storm's
// TestGenerators, TestStormBoundedInTime), where nothing else runs beside
// it.
func scenarioConfig() Config {
	cfg := DefaultConfig()
	cfg.PhaseDuration = 5 * time.Second
	cfg.Settle = 500 * time.Millisecond
	// 5 s phases give ~250 new-connection samples, whose p99 is the 3rd
	// slowest: wider than the demo's 5x, still far below what a lost SYN
	// (1 s) costs.
	cfg.Budget.P99Ratio = 8
	if testing.Short() {
		cfg = ShortConfig()
	}
	if testutil.Emulated() {
		// Under TCG both vCPUs share one host thread: a short phase's p99
		// is the emulator's scheduling more than the edge's (a 6.1 guest
		// saw 27 ms baseline, 225 ms under a storm the shield dropped, on
		// a loaded host). The ratio stays, wide enough for that; the
		// datagram service's answers and the counters are asserted
		// exactly as on the host.
		cfg.Budget.P99Ratio = 20
		// Both vCPUs share one host thread under TCG: the generator's
		// work and the shield's drops take the edge's CPU, an artifact
		// of emulation (a soak saw kept-alive p99s of 5-9 ms at baseline,
		// 120-340 ms under storms the shield dropped). Every kind gets
		// the new connection's floor, so the budget is at least 400 ms:
		// a lost SYN (1 s) still breaks it, and the datagram answers,
		// sent once, carry the rest.
		cfg.Budget.P99FloorKeep = cfg.Budget.P99Floor
		// An emulated edge answers its API in hundreds of milliseconds,
		// more when the host is busy: the API must answer, not race.
		cfg.WatchTimeout = 5 * time.Second
	}
	return cfg
}

// runScenario runs cfg, logs its table and writes its JSON where
// SHIELD_E2E_OUT says.
func runScenario(t *testing.T, cfg Config, name string) *Result {
	t.Helper()
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err, "Run")
	var b strings.Builder
	PrintTable(&b, res)
	t.Log(b.String())
	if dir := os.Getenv("SHIELD_E2E_OUT"); dir != "" {
		assert.NoError(t, WriteJSON(filepath.Join(dir, name+".json"), res))
	}
	var names []string
	for _, p := range res.Phases {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"baseline", "few-sources", "many-forged", "recovery"}, names, "ran phases")
	checkNoLeftovers(t)
	return res
}

// TestScenario runs the storm of `shieldlab storm` with short phases: every
// assertion of the demo must hold, and the same storms with no program
// attached must break the legitimate client's budget. Before 5.18 the storm
// comes from the AF_PACKET generator, as `shieldlab storm` would raise it
// there.
func TestScenario(t *testing.T) {
	testutil.Root(t)
	res := runScenario(t, scenarioConfig(), "storm")
	if !res.OK && testutil.Emulated() && latencyOnly(res) {
		// Under TCG a host busy elsewhere stalls the whole guest for
		// hundreds of milliseconds, and a phase's p99 of some twenty
		// requests is its worst one: a soak on a loaded host failed 2 of
		// 8 runs this way, every counter and contrast check holding. A
		// shield that really slows the edge fails both runs.
		t.Logf("RERUN: under emulation only latency budgets failed (%s); the storm runs once more and must pass whole",
			strings.Join(res.Failed, "; "))
		res = runScenario(t, scenarioConfig(), "storm-rerun")
	}
	assert.True(t, res.OK, "assertions failed:\n%s", strings.Join(res.Failed, "\n"))
	var names []string
	for _, p := range res.Contrast {
		names = append(names, p.Name)
		assert.True(t, !p.Shield && p.Counters == nil && p.Sent.Frames > 0 && p.Legit.Requests > 0,
			"contrast %s: shield %v, counters %v, sent %d, %d requests; want no shield or counters, and a storm and requests",
			p.Name, p.Shield, p.Counters, p.Sent.Frames, p.Legit.Requests)
		assert.True(t, checked(p, HarmCheck), "contrast %s: the storm did not break the budget of an unprotected edge", p.Name)
	}
	assert.Equal(t, []string{"no-shield/few-sources", "no-shield/many-forged"}, names, "ran contrast phases")
}

// TestScenarioDryRun is the suite's proof that its budget has teeth: the
// same storms against a shield in dry-run (counting what it would drop,
// passing everything) must break the budget in every storm phase, while
// every assertion about what the shield counted still holds. In the VM
// matrix TestScenario's contrast phases prove on each kernel that the
// budget breaks without the shield, and shield/datapath's TestDryRun that
// the program counts and passes in dry-run; this storm, a property of the
// suite, runs on the host (18 s a kernel under TCG).
func TestScenarioDryRun(t *testing.T) {
	testutil.HostOnly(t, "the suite's budget breaks under a dry-run shield")
	testutil.Root(t)
	cfg := scenarioConfig()
	cfg.Limits.DryRun = true
	cfg.Contrast = false
	res := runScenario(t, cfg, "storm-dry-run")
	assert.False(t, res.OK, "a dry-run storm met the budget: the budget cannot fail for its purpose")
	for _, p := range res.Phases {
		var broke []string
		for _, c := range p.Checks {
			switch {
			case c.OK:
			case c.Budget:
				broke = append(broke, c.Name)
			default:
				assert.Failf(t, "a check other than the budget failed in dry-run", "%s: %s failed: %s (only the budget may break in dry-run)", p.Name, c.Name, c.Detail)
			}
		}
		if p.Storm != string(stormNone) {
			assert.NotEmpty(t, broke, "%s: a dry-run shield kept the budget under a storm", p.Name)
		}
	}
}

// latencyOnly reports whether res failed on latency alone: p99 budgets of
// shielded phases, or a contrast whose storm did not break the budget
// (under emulation a guest stalled during the baseline inflates the p99 the
// budget is a multiple of: 6.12 once measured a 41.7 ms baseline, 834 ms of
// budget, and 729 ms unprotected); every count, attribution and success
// rate of a shielded phase held.
func latencyOnly(res *Result) bool {
	if res.OK {
		return false
	}
	for _, p := range res.Phases {
		for _, c := range p.Checks {
			if !c.OK && !(c.Budget && strings.HasPrefix(c.Name, "p99 ")) {
				return false
			}
		}
	}
	for _, p := range res.Contrast {
		for _, c := range p.Checks {
			if !c.OK && !c.Budget && c.Name != HarmCheck {
				return false
			}
		}
	}
	return true
}

// checked reports whether ph has a check called name, and it held.
func checked(ph *Phase, name string) bool {
	for _, c := range ph.Checks {
		if c.Name == name {
			return c.OK
		}
	}
	return false
}

// TestScenarioInterrupted: a run cancelled mid-phase (Ctrl-C) returns the
// cancellation, is not OK, and removes everything it made.
func TestScenarioInterrupted(t *testing.T) {
	testutil.Root(t)
	cfg := DefaultConfig()
	cfg.PhaseDuration = 10 * time.Second
	cfg.Rate = 50_000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Setup takes a second (the client's warm-up): cancel inside the
	// baseline.
	time.AfterFunc(2*time.Second, cancel)
	res, err := Run(ctx, cfg)
	assert.ErrorIs(t, err, context.Canceled, "Run cancelled")
	assert.True(t, res != nil && !res.OK && res.Error != "", "Run cancelled: result %+v, want not OK, with the error", res)
	checkNoLeftovers(t)
}

// checkNoLeftovers fails t if a namespace of this process remains.
func checkNoLeftovers(t *testing.T) {
	t.Helper()
	m, err := filepath.Glob(fmt.Sprintf("/run/netns/%s*-%d", topo.Prefix, os.Getpid()))
	require.NoError(t, err)
	assert.Empty(t, m, "namespaces left behind")
}

// TestLatencyOnly: only a run that failed on latency (shielded phases' p99
// budgets, a contrast's storm within the budget), everything else holding,
// is run again under emulation.
func TestLatencyOnly(t *testing.T) {
	p99 := Check{Name: "p99 udp within budget", Budget: true}
	success := Check{Name: "udp success", Budget: true}
	counted := Check{Name: "counters add up"}
	hurt := Check{Name: HarmCheck}
	ok := func(c Check) Check { c.OK = true; return c }
	for _, tc := range []struct {
		name            string
		phase, contrast []Check
		want            bool
	}{
		{"all held", []Check{ok(p99), ok(success), ok(counted)}, []Check{ok(hurt)}, false},
		{"p99 alone", []Check{p99, ok(success), ok(counted)}, []Check{ok(hurt), success}, true},
		{"success rate", []Check{ok(p99), success, ok(counted)}, []Check{ok(hurt)}, false},
		{"a count", []Check{p99, ok(success), counted}, []Check{ok(hurt)}, false},
		{"the contrast held its budget", []Check{ok(p99)}, []Check{hurt}, true},
		{"the contrast held its budget, a count failed", []Check{ok(p99), counted}, []Check{hurt}, false},
	} {
		res := &Result{OK: true, Phases: []*Phase{{Name: "few-sources", Checks: tc.phase}},
			Contrast: []*Phase{{Name: "no-shield/few-sources", Checks: tc.contrast}}}
		for _, c := range tc.phase {
			res.OK = res.OK && c.OK
		}
		for _, c := range tc.contrast {
			res.OK = res.OK && (c.OK || c.Budget)
		}
		assert.Equal(t, tc.want, latencyOnly(res), "%s: latencyOnly()", tc.name)

	}
}
