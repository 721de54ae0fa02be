package testutil

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// InVM reports a test binary run by the VM matrix (vmtest exports
// VMTEST=1 in the guest): alone, without the repository's sources, Docker
// or a toolchain.
func InVM() bool { return os.Getenv("VMTEST") == "1" }

// HostOnly skips t in the VM matrix: for a test whose subject does not
// depend on the kernel (pure Go, or Go logic over maps whose kernel side
// other tests prove on every kernel), the host's run proves it for all of
// them, and under TCG it costs the matrix seconds per kernel. why names
// what the host proves.
func HostOnly(t testing.TB, why string) {
	t.Helper()
	if InVM() {
		t.Skipf("host only (%s): the host's run proves it for every kernel", why)
	}
}

// RepoFile returns the path of rel under root, the repository's top
// directory seen from the test's package. A test that reads the sources
// skips in the VM matrix, where they are not (the host's run checks), and
// fails anywhere else they are missing: a check that quietly skips on the
// host would check nothing.
func RepoFile(t testing.TB, root, rel string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if _, err := os.Stat(p); err != nil {
		if InVM() {
			t.Skip("the repository's sources are not here (a test binary run alone in a VM); the host's run checks")
		}
		t.Fatalf("the repository's sources are needed: %v", err)
	}
	return p
}

// RepoFields returns the words of the first group of re in the
// repository's file rel (root as for RepoFile), e.g. the packages a
// Makefile variable lists. It skips in the VM matrix as RepoFile does and
// fails the test when the file or the line is missing.
func RepoFields(t testing.TB, root, rel, re string) []string {
	t.Helper()
	b, err := os.ReadFile(RepoFile(t, root, rel))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(re).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no line matches %s", rel, re)
	}
	return strings.Fields(string(m[1]))
}

// DialFromNetns moves the calling thread, locked to it for good, into the
// named network namespace and dials TCP dst from there within 5 s: the
// client half of a helper process a test starts (in a cgroup, say) to
// connect from inside the test's topology.
func DialFromNetns(name, dst string) (net.Conn, error) {
	runtime.LockOSThread()
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, err
	}
	if err := netns.Set(h); err != nil {
		return nil, err
	}
	return net.DialTimeout("tcp", dst, 5*time.Second)
}
