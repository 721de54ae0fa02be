package testutil

import (
	"os"
	"testing"

	"github.com/cilium/ebpf/rlimit"

	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/kernel"
)

// RequirePriv is set (SHIELD_REQUIRE_PRIV=1, as CI and the VMs do) when a
// skip for missing privilege or a kernel feature must be a failure.
func RequirePriv() bool { return os.Getenv("SHIELD_REQUIRE_PRIV") == "1" }

// SkipOrFail skips t with reason, or fails it when RequirePriv is set.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if RequirePriv() {
		t.Fatalf("required but unavailable (SHIELD_REQUIRE_PRIV=1): %s", reason)
	}
	t.Skip(reason)
}

// Root skips (or fails, see RequirePriv) unless the test runs as root, and
// lifts RLIMIT_MEMLOCK where the kernel still charges BPF maps to it (before
// 5.11), so a test that creates a map itself does not depend on some earlier
// test having loaded a program. Root's locked_vm is shared by every process
// of the user: on 5.10 under TCG a package's tiny test map failed with EPERM
// while the maps of the package run before it were still being freed.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root (CAP_BPF, CAP_NET_ADMIN)")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("lifting RLIMIT_MEMLOCK: %v", err)
	}
}

// KernelAtLeast reports whether the running kernel is at least major.minor.
func KernelAtLeast(major, minor int) bool { return kernel.AtLeast(major, minor) }

// Kernel skips t when the kernel is older than major.minor, naming feature.
// A kernel that is new enough but lacks the feature is the test's failure to
// report, not this helper's.
func Kernel(t testing.TB, major, minor int, feature string) {
	t.Helper()
	if !KernelAtLeast(major, minor) {
		t.Skipf("%s needs kernel %d.%d+", feature, major, minor)
	}
}

// Feature skips t when the kernel lacks f, a feature only tests and
// benchmarks need, naming the feature and the errno ("kernel feature
// map_elem_iter unavailable (EPERM): ..."). It skips under
// SHIELD_REQUIRE_PRIV too: kernel builds differ, and the gate fails a pinned
// kernel that loses a feature it had (vmtest/gate).
func Feature(t testing.TB, f *features.Feature) {
	t.Helper()
	if err := f.Check(); err != nil {
		t.Skip(err.Error())
	}
}
