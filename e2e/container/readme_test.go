package container

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeRunLines: the manual's "Run as a container" (docs/container.md,
// moved there from the README) gives the docker run lines the lanes prove,
// word for word.
func TestReadmeRunLines(t *testing.T) {
	b, err := os.ReadFile("../../docs/container.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, caps := range [][]string{ShieldCaps, ModernCaps} {
		if line := RunLine("EDGE", caps); !strings.Contains(string(b), line) {
			t.Errorf("docs/container.md lacks the line the lane proves:\n%s", line)
		}
	}
}
