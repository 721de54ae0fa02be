package gate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"xdpshield/internal/testutil"
)

// TestPackagesAgree: the Makefile's GATE_PKGS and ci/vmtest.sh's default
// host packages are Packages, so make gate, make gate-update, CI and the
// teeth test run the same behaviour packages the baseline names.
func TestPackagesAgree(t *testing.T) {
	root := filepath.Join("..", "..")
	testutil.RepoFile(t, root, "Makefile")
	want := strings.Join(Packages, " ")
	for _, c := range []struct{ file, re string }{
		{"Makefile", `(?m)^GATE_PKGS \?= (.*)$`},
		{"ci/vmtest.sh", `(?m)^HOST_PKGS="\$\{GATE_PKGS:-(.*)\}"$`},
	} {
		b, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(c.re).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no line matches %s", c.file, c.re)
			continue
		}
		if got := strings.Join(strings.Fields(string(m[1])), " "); got != want {
			t.Errorf("%s: gate packages = %q, want %q (gate.Packages)", c.file, got, want)
		}
	}
}
