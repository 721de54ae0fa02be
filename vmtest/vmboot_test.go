package vmtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/vmtest/kernels"
)

// needVM skips VM tests in -short mode, and skips (or fails, with
// SHIELD_REQUIRE_PRIV=1) when qemu or busybox-static are missing.
func needVM(t *testing.T) *kernels.Cache {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM; skipped with -short")
	}
	for _, tool := range []string{"qemu-system-x86_64", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, tool+" not installed (ci/deps.sh installs it)")
		}
	}
	return &kernels.Cache{Dir: kernels.DefaultCacheDir()}
}

// TestBrokenProgramOn510 is the harness's proof that the matrix catches a
// kernel dependency: an XDP program using bpf_ktime_get_coarse_ns (5.11+)
// without a probe must fail on 5.10, with the verifier's error readable in
// the matrix. One boot of 5.10.
func TestBrokenProgramOn510(t *testing.T) {
	c := needVM(t)
	var live bytes.Buffer
	m := &Matrix{
		Cache: c, Kernels: []string{"5.10"}, Packages: []string{"./testdata/broken"},
		TestFlags: []string{"-test.v"}, BootTimeout: 90 * time.Second, Timeout: 5 * time.Minute,
		Output: &live,
	}
	rep, code, err := m.Run(context.Background())
	require.NoError(t, err, "Matrix.Run()\n%s", live.String())
	var out bytes.Buffer
	require.NoError(t, rep.Render(&out))
	t.Logf("matrix:\n%s", out.String())
	require.Equal(t, ExitTestFailure, code, "Matrix.Run() code\n%s", live.String())
	for _, want := range []string{
		"github.com/xdpshield/xdpshield/vmtest/testdata/broken  0/1/0",
		"[5.10] github.com/xdpshield/xdpshield/vmtest/testdata/broken TestCoarseClockWithoutProbe",
		"call unknown#160",
		"invalid func unknown#160",
	} {
		assert.Contains(t, out.String(), want, "matrix output lacks %q", want)
	}
	k := rep.Kernels[0]
	assert.Positive(t, k.BootToFirstTestSeconds, "kernel report = %+v, want a boot figure", k)
	assert.Equal(t, "5.10.0-32-cloud-amd64", k.Release, "kernel report = %+v, want release 5.10.0-32-cloud-amd64", k)
}

// writeScript writes a guest "test binary" that is a busybox sh script.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.test")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return p
}

// TestExitCodes boots the oldest kernel to check the distinct exit codes.
// The boot timeout costs no boot; the others need one each, so they run
// only with VMTEST_ALL=1 (make test stays at one boot).
func TestExitCodes(t *testing.T) {
	c := needVM(t)
	l, _, err := kernels.LoadLock(".")
	require.NoError(t, err)
	pin, err := l.Find("5.10")
	require.NoError(t, err)
	k, err := c.Fetch(context.Background(), pin)
	require.NoError(t, err)
	tests := []struct {
		name        string
		script      string
		bootTimeout time.Duration
		timeout     time.Duration
		want        ExitCode
		slow        bool
	}{
		{name: "boot timeout", script: "exit 0", bootTimeout: time.Millisecond, want: ExitBootTimeout},
		{name: "pass", script: "echo hello", want: ExitPass, slow: true},
		{name: "test failure", script: "exit 3", want: ExitTestFailure, slow: true},
		{name: "kernel panic", script: "echo c >/proc/sysrq-trigger; sleep 30", want: ExitKernelPanic, slow: true},
		{name: "run timeout", script: "sleep 600", timeout: 20 * time.Second, want: ExitRunTimeout, slow: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.slow && os.Getenv("VMTEST_ALL") != "1" {
				t.Skip("one more boot; set VMTEST_ALL=1")
			}
			var out bytes.Buffer
			vm := &VM{Kernel: k, Modules: []string{}, Tools: []string{},
				Runs:        []Run{{Name: "script", Binary: writeScript(t, tt.script)}},
				BootTimeout: tt.bootTimeout, Timeout: tt.timeout, Output: &out, CacheDir: c.Dir}
			res, err := vm.Boot(context.Background())
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Code, "Boot() code (%v)\n%s", res.Err, out.String())
		})
	}
}

// TestGoTestExec runs `go test -exec vmexec` on the topology package in 6.1:
// the documented way to run one package in one kernel. One more boot, so
// only with VMTEST_ALL=1.
func TestGoTestExec(t *testing.T) {
	needVM(t)
	if os.Getenv("VMTEST_ALL") != "1" {
		t.Skip("one more boot; set VMTEST_ALL=1")
	}
	root, err := kernels.ModuleRoot(".")
	require.NoError(t, err)
	vmexec := filepath.Join(t.TempDir(), "vmexec")
	out, err := exec.Command("go", "build", "-o", vmexec, "github.com/xdpshield/xdpshield/vmtest/cmd/vmexec").CombinedOutput()
	require.NoError(t, err, "build vmexec\n%s", out)
	cmd := exec.Command("go", "test", "-count=1", "-v", "-exec", vmexec+" -kernel 6.1", "./internal/topo")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "go test -exec\n%s", out)
	for _, want := range []string{"--- PASS: TestPairPingAndCleanup", "ok  \txdpshield/internal/topo"} {
		assert.Contains(t, string(out), want, "go test -exec output lacks %q", want)
	}
}
