package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersionOf(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		bi             *debug.BuildInfo
		ok             bool
		ldVer, ldRev   string
		wantVer, wantR string
	}{
		{"checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", "abc123", "vcs.modified", "false")}, true, "", "", "(devel)", "abc123"},
		{"dirty checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", "abc123", "vcs.modified", "true")}, true, "", "", "(devel)", "abc123-dirty"},
		{"go install @tag", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "", "", "v1.2.3", "unknown"},
		{"ldflags win", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", "abc123")}, true, "v9", "r9", "v9", "r9"},
		{"no build info", nil, false, "", "", "unknown", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := versionOf(tc.bi, tc.ok, tc.ldVer, tc.ldRev)
			assert.Equal(t, tc.wantVer, v, "versionOf(): version")
			assert.Equal(t, tc.wantR, r, "versionOf(): revision")
		})
	}
}

// TestBuildStampsRevision: a binary built from this checkout (-buildvcs=true:
// this machine sets GOFLAGS=-buildvcs=false) carries the
// checkout's revision for shield_build_info, not "unknown".
func TestBuildStampsRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	if fi, err := os.Stat("../../.git"); err != nil || !fi.IsDir() {
		// go build looks for a .git directory; a worktree's is a file.
		t.Skip("a git worktree (.git is not a directory): go build stamps no VCS information here")
	}
	bin := filepath.Join(t.TempDir(), "shield")
	out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	out, err = exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err, "go version -m")
	assert.Contains(t, string(out), "vcs.revision="+strings.TrimSpace(string(head)), "go version -m %s has no vcs.revision=%s:\n%s", bin, strings.TrimSpace(string(head)), out)
}
