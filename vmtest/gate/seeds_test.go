package gate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeedsApply: every seed's Old occurs exactly once in its file, so a
// source change that strands a seed fails `make test`, not only the slow
// `make gate-teeth` (two seeds went stale unnoticed across one merge).
func TestSeedsApply(t *testing.T) {
	names := map[string]bool{}
	for _, s := range Seeds {
		if names[s.Name] {
			t.Errorf("seed name %s used twice", s.Name)
		}
		names[s.Name] = true
		b, err := os.ReadFile(filepath.Join("..", "..", s.File))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), s.Old); n != 1 {
			t.Errorf("seed %s (%s): %q occurs %d times in %s, want once: update the seed with the source", s.Name, s.Area, s.Old, n, s.File)
		}
	}
}
