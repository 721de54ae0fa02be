package container

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeRunLines: the README's "Run as a container" gives the docker
// run lines the lanes prove, word for word.
func TestReadmeRunLines(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, caps := range [][]string{ShieldCaps, ModernCaps} {
		if line := RunLine("EDGE", caps); !strings.Contains(string(b), line) {
			t.Errorf("README.md lacks the line the lane proves:\n%s", line)
		}
	}
}
