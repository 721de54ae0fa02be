package proc

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/study/results"
)

// TestProcReadings: the study's machine readings agree with the files as
// the kernel writes them (coreutils cut, head, grep: not this code): the
// load averages, the CPU model, and the CPU times growing as this
// process works.
func TestProcReadings(t *testing.T) {
	out, err := exec.Command("cut", "-d", " ", "-f", "1-3", "/proc/loadavg").Output()
	require.NoError(t, err)
	// The load may change between the two reads: compare the format,
	// the kernel's two decimals.
	got := results.LoadAvg()
	require.Regexp(t, `^\d+\.\d\d \d+\.\d\d \d+\.\d\d$`, got, "LoadAvg() (/proc/loadavg: %q)", out)
	model, err := exec.Command("sh", "-c", "grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-").Output()
	require.NoError(t, err)
	if want := strings.TrimSpace(string(model)); want != "" {
		assert.Equal(t, want, results.CPUModel())
	}
	e := &Edge{pid: os.Getpid()}
	a, err := e.CPU()
	require.NoError(t, err)
	for x := 0; x < 200_000_000; x++ {
		_ = x * x
	}
	b, err := e.CPU()
	require.NoError(t, err)
	assert.Greater(t, b.Proc, a.Proc, "this process's CPU time")
	assert.GreaterOrEqual(t, b.Busy, a.Busy)
	assert.GreaterOrEqual(t, b.Busy, b.Softirq)
}
