package gate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeedsApply: every seed's Old occurs exactly once in its file, so a
// source change that strands a seed fails `make test`, not only the slow
// `make gate-teeth` (two seeds went stale unnoticed across one merge).
func TestSeedsApply(t *testing.T) {
	names := map[string]bool{}
	for _, s := range Seeds {
		assert.False(t, names[s.Name], "seed name %s used twice", s.Name)
		names[s.Name] = true
		b, err := os.ReadFile(filepath.Join("..", "..", s.File))
		require.NoError(t, err)
		assert.Equal(t, 1, strings.Count(string(b), s.Old), "seed %s (%s): %q occurs in %s other than once: update the seed with the source", s.Name, s.Area, s.Old, s.File)
	}
}
