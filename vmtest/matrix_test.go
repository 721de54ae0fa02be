package vmtest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestParseTestOutput(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []TestResult
	}{
		{
			name: "verbose with subtests and a skip",
			in: `=== RUN   TestA
--- PASS: TestA (0.01s)
=== RUN   TestLive
    live_test.go:20: BPF_F_TEST_XDP_LIVE_FRAMES needs kernel 5.18+
--- SKIP: TestLive (0.00s)
=== RUN   TestTable
=== RUN   TestTable/v4
=== RUN   TestTable/v6
    table_test.go:9: got 1, want 2
--- FAIL: TestTable (0.20s)
    --- PASS: TestTable/v4 (0.10s)
    --- FAIL: TestTable/v6 (0.10s)
FAIL
`,
			want: []TestResult{
				{Name: "TestA", Status: "pass", Seconds: 0.01},
				{Name: "TestLive", Status: "skip", Output: []string{"live_test.go:20: BPF_F_TEST_XDP_LIVE_FRAMES needs kernel 5.18+"}, Reason: "BPF_F_TEST_XDP_LIVE_FRAMES needs kernel 5.18+"},
				{Name: "TestTable/v4", Status: "pass", Seconds: 0.1},
				{Name: "TestTable/v6", Status: "fail", Seconds: 0.1, Output: []string{"table_test.go:9: got 1, want 2"}},
			},
		},
		{
			name: "not verbose: output after the result line",
			in: `--- FAIL: TestLoad (0.09s)
    broken_test.go:35: load program: invalid argument:
        invalid func unknown#160
FAIL
`,
			want: []TestResult{{Name: "TestLoad", Status: "fail", Seconds: 0.09,
				Output: []string{"broken_test.go:35: load program: invalid argument:", "invalid func unknown#160"}}},
		},
		{
			name: "parallel: output follows === NAME",
			in: `=== RUN   TestP1
=== PAUSE TestP1
=== RUN   TestP2
=== PAUSE TestP2
=== CONT  TestP1
=== CONT  TestP2
=== NAME  TestP1
    p_test.go:5: needs kernel 6.6+
--- SKIP: TestP1 (0.00s)
--- PASS: TestP2 (0.00s)
`,
			want: []TestResult{
				{Name: "TestP1", Status: "skip", Output: []string{"p_test.go:5: needs kernel 6.6+"}, Reason: "needs kernel 6.6+"},
				{Name: "TestP2", Status: "pass"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseTestOutput(strings.Split(tt.in, "\n"))
			require.Equal(t, tt.want, got, "ParseTestOutput()")
		})
	}
}

func sampleReport() *Report {
	r := &Report{Accel: "tcg", Seconds: 312, ExitCode: 1, Verdict: "test failure",
		Packages: []string{"github.com/xdpshield/xdpshield/sim", "github.com/xdpshield/xdpshield/e2e"},
		Kernels: []KernelReport{
			{Name: "5.10", Release: "5.10.0-32-cloud-amd64", Verdict: "test failure", Code: 1, BootToInitSeconds: 2.1, BootToFirstTestSeconds: 2.4, Seconds: 80},
			{Name: "7.2", Release: "7.2.13+deb14-cloud-amd64", Verdict: "pass", BootToInitSeconds: 2.8, BootToFirstTestSeconds: 3.1, Seconds: 75},
		},
	}
	live := TestResult{Name: "TestStorm/live", Status: "pass", Seconds: 3}
	skipped := TestResult{Name: "TestStorm/live", Status: "skip", Reason: "BPF_F_TEST_XDP_LIVE_FRAMES needs kernel 5.18+"}
	r.Cells = []Cell{
		{Kernel: "5.10", Package: "github.com/xdpshield/xdpshield/sim", Status: "fail", Pass: 30, Fail: 1, Seconds: 38.2},
		{Kernel: "5.10", Package: "github.com/xdpshield/xdpshield/e2e", Status: "pass", Pass: 4, Skip: 1, Seconds: 12.5, Tests: []TestResult{skipped}},
		{Kernel: "7.2", Package: "github.com/xdpshield/xdpshield/sim", Status: "pass", Pass: 31, Seconds: 26.4},
		{Kernel: "7.2", Package: "github.com/xdpshield/xdpshield/e2e", Status: "pass", Pass: 5, Seconds: 14, Tests: []TestResult{live}},
	}
	r.SkipDiffs = skipDiffs(r.Cells)
	r.Failures = []Failure{{Kernel: "5.10", Package: "github.com/xdpshield/xdpshield/sim", Test: "TestCoarseClock",
		Output: []string{"sim_test.go:12: load: invalid argument:", "0: (85) call unknown#160", "invalid func unknown#160"}}}
	return r
}

func TestRender(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, sampleReport().Render(&buf))
	golden := filepath.Join("testdata", "matrix.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -run TestRender -update")
	require.Equal(t, string(want), buf.String(), "Render() mismatch")
}

func TestSkipDiffs(t *testing.T) {
	got := sampleReport().SkipDiffs
	want := []SkipDiff{{Package: "github.com/xdpshield/xdpshield/e2e", Test: "TestStorm/live",
		SkippedOn: map[string]string{"5.10": "BPF_F_TEST_XDP_LIVE_FRAMES needs kernel 5.18+"}, PassedOn: []string{"7.2"}}}
	require.Equal(t, want, got, "skipDiffs()")
}

func TestCellFill(t *testing.T) {
	tests := []struct {
		name   string
		run    RunResult
		status string
	}{
		{"pass", RunResult{Exit: 0, Output: []string{"--- PASS: TestA (0.00s)"}}, "pass"},
		{"failed test", RunResult{Exit: 1, Output: []string{"--- FAIL: TestA (0.00s)"}}, "fail"},
		{"crash without a result line", RunResult{Exit: 2, Output: []string{"panic: boom"}}, "fail"},
		{"zero tests ran", RunResult{Exit: 0, Output: []string{"testing: warning: no tests to run", "PASS"}}, "fail"},
		{"never finished", RunResult{Exit: -1}, "not finished"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Cell
			c.fill(tt.run)
			require.Equal(t, tt.status, c.Status, "fill(%+v).Status", tt.run)
		})
	}
}

func TestWorse(t *testing.T) {
	tests := []struct{ a, b, want ExitCode }{
		{ExitPass, ExitTestFailure, ExitTestFailure},
		{ExitKernelPanic, ExitTestFailure, ExitKernelPanic},
		{ExitBootTimeout, ExitHarnessError, ExitHarnessError},
		{ExitRunTimeout, ExitPass, ExitRunTimeout},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, worse(tt.a, tt.b), "worse(%v, %v)", tt.a, tt.b)
	}
}
