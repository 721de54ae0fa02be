package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// labDeps are the import paths the product binary must not link: the test
// machinery of the standard library and of third parties, the packet
// builder of the simulator, and every package of the lab (cmd/shieldlab
// links those). A path matches itself and everything under it.
var labDeps = []string{
	"testing",
	"github.com/google/gopacket",
	"github.com/stretchr/testify",
	"github.com/testcontainers/testcontainers-go",
	"github.com/xdpshield/xdpshield/sim",
	"github.com/xdpshield/xdpshield/e2e",
	"github.com/xdpshield/xdpshield/study",
	"github.com/xdpshield/xdpshield/vmtest",
	"github.com/xdpshield/xdpshield/vmtest/gate",
	"github.com/xdpshield/xdpshield/internal/testutil",
	"github.com/xdpshield/xdpshield/internal/topo",
	"github.com/xdpshield/xdpshield/cmd/shieldlab",
}

// labLinked returns the packages of deps that labDeps names.
func labLinked(deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, l := range labDeps {
			if d == l || strings.HasPrefix(d, l+"/") {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}

func TestLabLinked(t *testing.T) {
	deps := []string{"fmt", "testing/iotest", "github.com/xdpshield/xdpshield/simple", "github.com/xdpshield/xdpshield/sim", "github.com/google/gopacket/layers", "github.com/xdpshield/xdpshield/shield"}
	require.Equal(t, []string{"testing/iotest", "github.com/xdpshield/xdpshield/sim", "github.com/google/gopacket/layers"}, labLinked(deps))
}

// TestProductLinksNoLab: `go list -deps ./cmd/shield` names no test
// machinery and no lab package. The go command needs the module cache;
// run as nobody (the unprivileged pass under root) it cannot read root's,
// and the privileged pass checks.
func TestProductLinksNoLab(t *testing.T) {
	if testutil.InVM() {
		t.Skip("no toolchain in the VM matrix; the host's run checks")
	}
	cmd := exec.Command("go", "list", "-deps", ".")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && os.Geteuid() != 0 && strings.Contains(stderr.String(), "permission denied") {
		testutil.SkipOrFail(t, "go list cannot read the module cache as this user: "+stderr.String())
	}
	var ee *exec.Error
	require.False(t, errors.As(err, &ee), "the go command is needed: %v", err)
	require.NoError(t, err, "go list -deps ./cmd/shield:\n%s", stderr.String())
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/xdpshield/xdpshield/shield", "go list -deps printed no product package")
	require.Empty(t, labLinked(deps), "the shield binary links test or lab packages (move them to cmd/shieldlab)")
}
