package main

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLabCommandsNamed: the commands that moved to cmd/shieldlab exit 2
// and name the lab binary, not "unknown command".
func TestLabCommandsNamed(t *testing.T) {
	for _, name := range []string{"storm", "study", "study-edge", "e2e-edge", "e2e-storm"} {
		cmd := exec.Command(os.Args[0], name)
		cmd.Env = append(os.Environ(), envAsMain+"=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "shield %s", name)
		assert.Equal(t, 2, ee.ExitCode(), "shield %s: exit code", name)
		assert.Contains(t, string(out), "run `shieldlab "+name+"`", "shield %s", name)
	}
}
