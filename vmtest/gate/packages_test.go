package gate

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestPackagesAgree: the Makefile's GATE_PKGS and ci/vmtest.sh's default
// host packages are Packages, so make gate, make gate-update, CI and the
// teeth test run the same behaviour packages the baseline names.
func TestPackagesAgree(t *testing.T) {
	root := filepath.Join("..", "..")
	want := strings.Join(Packages, " ")
	for _, c := range []struct{ file, re string }{
		{"Makefile", `(?m)^GATE_PKGS \?= (.*)$`},
		{"ci/vmtest.sh", `(?m)^HOST_PKGS="\$\{GATE_PKGS:-(.*)\}"$`},
	} {
		got := strings.Join(testutil.RepoFields(t, root, c.file, c.re), " ")
		assert.Equal(t, want, got, "%s: gate packages, want gate.Packages", c.file)
	}
}
