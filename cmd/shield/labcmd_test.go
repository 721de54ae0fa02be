package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLabCommandsNamed: the commands that moved to cmd/shieldlab are named
// with the lab binary, not reported as unknown (main exits 2 with the
// hint). In-process: the unprivileged pass runs this binary as nobody, who
// may not read the build directory to run it again.
func TestLabCommandsNamed(t *testing.T) {
	for _, name := range []string{"storm", "study", "study-edge", "e2e-edge", "e2e-storm"} {
		hint, ok := labHint(name)
		assert.True(t, ok, "labHint(%q)", name)
		assert.Contains(t, hint, "run `shieldlab "+name+"`", "labHint(%q)", name)
	}
	for _, name := range []string{"serve", "status", "stormy"} {
		_, ok := labHint(name)
		assert.False(t, ok, "labHint(%q)", name)
	}
}
