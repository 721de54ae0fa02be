package vmtest

import (
	"github.com/xdpshield/xdpshield/vmtest/kernels"

	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpshield/xdpshield/internal/testutil"
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
	if err != nil {
		t.Fatalf("Matrix.Run() error = %v\n%s", err, live.String())
	}
	var out bytes.Buffer
	if err := rep.Render(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("matrix:\n%s", out.String())
	if code != ExitTestFailure {
		t.Fatalf("Matrix.Run() code = %v, want %v\n%s", code, ExitTestFailure, live.String())
	}
	for _, want := range []string{
		"github.com/xdpshield/xdpshield/vmtest/testdata/broken  0/1/0",
		"[5.10] github.com/xdpshield/xdpshield/vmtest/testdata/broken TestCoarseClockWithoutProbe",
		"call unknown#160",
		"invalid func unknown#160",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("matrix output lacks %q", want)
		}
	}
	if k := rep.Kernels[0]; k.BootToFirstTestSeconds <= 0 || k.Release != "5.10.0-32-cloud-amd64" {
		t.Errorf("kernel report = %+v, want a boot figure and release 5.10.0-32-cloud-amd64", k)
	}
}

// writeScript writes a guest "test binary" that is a busybox sh script.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.test")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExitCodes boots the oldest kernel to check the distinct exit codes.
// The boot timeout costs no boot; the others need one each, so they run
// only with VMTEST_ALL=1 (make test stays at one boot).
func TestExitCodes(t *testing.T) {
	c := needVM(t)
	l, _, err := kernels.LoadLock(".")
	if err != nil {
		t.Fatal(err)
	}
	pin, err := l.Find("5.10")
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.Fetch(context.Background(), pin)
	if err != nil {
		t.Fatal(err)
	}
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
			if err != nil {
				t.Fatal(err)
			}
			if res.Code != tt.want {
				t.Fatalf("Boot() code = %v (%v), want %v\n%s", res.Code, res.Err, tt.want, out.String())
			}
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
	if err != nil {
		t.Fatal(err)
	}
	vmexec := filepath.Join(t.TempDir(), "vmexec")
	if out, err := exec.Command("go", "build", "-o", vmexec, "github.com/xdpshield/xdpshield/vmtest/cmd/vmexec").CombinedOutput(); err != nil {
		t.Fatalf("build vmexec: %v\n%s", err, out)
	}
	cmd := exec.Command("go", "test", "-count=1", "-v", "-exec", vmexec+" -kernel 6.1", "./internal/topo")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test -exec: %v\n%s", err, out)
	}
	for _, want := range []string{"--- PASS: TestPairPingAndCleanup", "ok  \txdpshield/internal/topo"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("go test -exec output lacks %q:\n%s", want, out)
		}
	}
}
