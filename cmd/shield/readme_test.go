package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestReadmeFrontDoor: README.md stays a front door (at most 300 lines,
// the manual in docs/), states the Go version go.mod names, and every
// relative link of the README, CONTRIBUTING.md and docs/ names a file
// that exists.
func TestReadmeFrontDoor(t *testing.T) {
	readme, err := os.ReadFile(testutil.RepoFile(t, "../..", "README.md"))
	require.NoError(t, err)
	lines := strings.Count(string(readme), "\n")
	assert.LessOrEqual(t, lines, 300, "README.md has %d lines: move the detail to docs/", lines)

	mod, err := os.ReadFile(testutil.RepoFile(t, "../..", "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	require.NotNil(t, m, "go.mod has no go line")
	assert.True(t, strings.Contains(string(readme), "Go "+string(m[1])), "README.md does not state go.mod's Go version, Go %s", m[1])

	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	more, err := filepath.Glob("../../docs/*/*.md")
	require.NoError(t, err)
	files := append(append([]string{"../../README.md", "../../CONTRIBUTING.md"}, docs...), more...)
	require.Greater(t, len(files), 10, "docs/ holds the manual")
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, l := range link.FindAllSubmatch(b, -1) {
			target := string(l[1])
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			_, err := os.Stat(filepath.Join(filepath.Dir(f), target))
			assert.NoError(t, err, "%s links to %s, which does not exist", f, target)
		}
	}
}
