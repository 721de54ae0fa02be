//go:build teeth

package gate

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestTeeth proves the gate has teeth: every bug of Seeds, seeded into a
// copy of the sources (the program rebuilt with bpf2go and clang when a .c
// or .h changes), makes the gate fail on the host, with the seed's Want in
// the failure listing. The unmodified copy must pass first, or a failure
// would prove nothing. Slow (a rebuild and the gate per seed): run by
// `make gate-teeth` only (build tag teeth), and it needs the committed
// baseline's host figures from this machine's kernel.
func TestTeeth(t *testing.T) {
	testutil.Root(t)
	if _, err := exec.LookPath("clang-14"); err != nil {
		testutil.SkipOrFail(t, "clang-14 not installed (ci/deps.sh installs it; bpf/gen.go pins it): seeded C cannot be rebuilt")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	baseline := filepath.Join(root, "fixtures", "gate", "baseline.json")
	if b := os.Getenv("GATE_BASELINE"); b != "" {
		baseline = b // e.g. a host-only baseline made with -kernels "" -update
	}
	_, err = os.Stat(baseline)
	require.NoError(t, err, "the teeth test compares with the committed baseline")

	// One directory for every seed: the build cache keys on paths, so a
	// fixed one rebuilds only what a seed changed.
	work := filepath.Join(os.TempDir(), "xdpshield-teeth")
	require.NoError(t, os.RemoveAll(work))
	t.Cleanup(func() { os.RemoveAll(work) })
	src := filepath.Join(work, "src")
	files := trackedFiles(t, root)

	gateRun := func(t *testing.T) (int, string) {
		t.Helper()
		start := time.Now()
		build := exec.Command("go", "build", "-o", filepath.Join(work, "vmtest"), "./vmtest/cmd/vmtest")
		build.Dir = src
		out, err := build.CombinedOutput()
		require.NoError(t, err, "build the gate in the copy:\n%s", out)
		out_ := filepath.Join(work, "out")
		// Speed: the copy's programs against the tree's committed
		// objects, timed in the same rounds; the unseeded copy must pass.
		cmd := exec.Command(filepath.Join(work, "vmtest"), "gate", "-kernels", "", "-subset",
			"-baseline", baseline, "-out", out_, "-speed-base", filepath.Join(root, "bpf"),
			"-host-packages", strings.Join(Packages, " "),
			"-testflags", "-test.short -test.v -test.timeout=5m")
		cmd.Dir = src
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		code := 0
		if err := cmd.Run(); err != nil {
			ee, ok := err.(*exec.ExitError)
			require.True(t, ok, "run the gate: %v\n%s", err, tailOf(buf.String(), 40))
			code = ee.ExitCode()
		}
		report, err := os.ReadFile(filepath.Join(out_, "gate.txt"))
		require.NoError(t, err, "the gate wrote no report (exit %d)\n%s", code, tailOf(buf.String(), 40))
		t.Logf("gate ran in %s, exit %d", time.Since(start).Round(time.Second), code)
		return code, string(report)
	}

	t.Run("unseeded passes", func(t *testing.T) {
		copyFiles(t, root, src, files)
		code, report := gateRun(t)
		require.Equal(t, 0, code, "the gate on the unmodified copy must pass:\n%s", report)
	})
	if t.Failed() {
		t.FailNow()
	}
	for _, s := range Seeds {
		t.Run(s.Name, func(t *testing.T) {
			copyFiles(t, root, src, files)
			path := filepath.Join(src, s.File)
			b, err := os.ReadFile(path)
			require.NoError(t, err, "seed %s: %s", s.Name, s.File)
			require.Equal(t, 1, strings.Count(string(b), s.Old), "seed %s (%s) no longer applies: %q occurs in %s other than once; the source changed: update the seed", s.Name, s.Area, s.Old, s.File)
			require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), s.Old, s.New, 1)), 0o644))
			if ext := filepath.Ext(s.File); ext == ".c" || ext == ".h" {
				gen := exec.Command("go", "generate", "./bpf/...")
				gen.Dir = src
				out, err := gen.CombinedOutput()
				require.NoError(t, err, "seed %s: the seeded program does not build\n%s", s.Name, out)
			}
			code, report := gateRun(t)
			failures := report
			if i := strings.Index(report, "\nFailures:\n"); i >= 0 {
				failures = report[i:]
			}
			t.Logf("seed %s (%s): %s -> %s\n%s", s.Name, s.Area, s.Old, s.New, tailOf(failures, 12))
			if !assert.Equal(t, 1, code, "seed %s (%s): gate exit, want 1 (a regression):\n%s", s.Name, s.Area, report) {
				return
			}
			assert.Contains(t, failures, s.Want, "seed %s (%s): the gate failed, but its failures do not mention %q", s.Name, s.Area, s.Want)
		})
	}
}

// trackedFiles lists the repository's files (git ls-files).
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	require.NoError(t, err, "git ls-files")
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	require.NotEmpty(t, files)
	return files
}

// copyFiles makes dst a copy of files under root, as they are in the work
// tree; what a previous seed changed is overwritten.
func copyFiles(t *testing.T, root, dst string, files []string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		require.NoError(t, err)
		p := filepath.Join(dst, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, b) {
			continue // unchanged: keep its mtime, and the build cache warm
		}
		info, err := os.Stat(filepath.Join(root, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, b, info.Mode().Perm()))
	}
}

func tailOf(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// TestSpeedClean: the programs timed against themselves, as the gate
// times a change against its base, pass on every path in 20 runs of 20
// (on the machine as it is, other jobs and all), and says how near the
// worst run came to the limit. GATE_SPEED_ONLY=xdplb/ times the
// balancer's paths alone; GATE_SPEED_RUNS sets the runs.
func TestSpeedClean(t *testing.T) {
	testutil.Root(t)
	self := map[string]*ebpf.CollectionSpec{}
	for _, o := range SpeedObjects {
		spec, err := o.Load()
		require.NoError(t, err)
		self[o.Name] = spec
	}
	runs := 20
	if n, err := strconv.Atoi(os.Getenv("GATE_SPEED_RUNS")); err == nil && n > 0 {
		runs = n
	}
	worst := map[string]float64{}
	passed := 0
	for i := range runs {
		out, err := Speed(SpeedOptions{Base: self, Only: os.Getenv("GATE_SPEED_ONLY")})
		require.NoError(t, err)
		require.NotEmpty(t, out, "no path named %q", os.Getenv("GATE_SPEED_ONLY"))
		fail := false
		for name, p := range out {
			require.Empty(t, p.Error, "run %d: %s", i, name)
			worst[name] = max(worst[name], p.VsBase)
			if p.VsBase > 1+DefaultThresholds.VsBase {
				fail = true
				t.Logf("run %d: %s at %+.1f%% of itself", i, name, 100*(p.VsBase-1))
			}
		}
		if !fail {
			passed++
		}
	}
	for name, w := range worst {
		t.Logf("%-20s worst of %d runs: %+.1f%% (limit +%.0f%%)", name, runs, 100*(w-1), 100*DefaultThresholds.VsBase)
	}
	require.Equal(t, runs, passed, "clean runs within the limit")
}
