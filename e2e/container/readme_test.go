package container

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeRunLines: the manual's "Run as a container" (docs/container.md,
// moved there from the README) gives the docker run lines the lanes prove,
// word for word.
func TestReadmeRunLines(t *testing.T) {
	b, err := os.ReadFile("../../docs/container.md")
	require.NoError(t, err)
	for _, caps := range [][]string{ShieldCaps, ModernCaps} {
		line := RunLine("EDGE", caps)
		assert.True(t, strings.Contains(string(b), line), "docs/container.md lacks the line the lane proves:\n%s", line)

	}
}
