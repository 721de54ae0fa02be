package sim

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// dropProgram loads sim's XDP_DROP reference, closed when tb ends.
func dropProgram(tb testing.TB) *ebpf.Program {
	tb.Helper()
	prog, err := DropProgram()
	require.NoError(tb, err, "load the reference program")
	tb.Cleanup(func() { prog.Close() })
	return prog
}

// TestScenarioRefusesToRunNothing: zero steps is an error, not a pass.
func TestScenarioRefusesToRunNothing(t *testing.T) {
	testutil.Root(t)
	_, err := Scenario{Name: "empty", Target: Target{Prog: dropProgram(t)}}.Exec()
	assert.ErrorContains(t, err, "has no steps")
}

// TestScenarioAnyProgram: the simulator runs a program that is not the
// shield (the XDP_DROP reference), without clock or counters.
func TestScenarioAnyProgram(t *testing.T) {
	testutil.Root(t)
	res := Scenario{Name: t.Name(), Target: Target{Prog: dropProgram(t)}, Steps: []Step{
		{Name: "ipv4", Frame: From("198.18.0.1", TCP).Bytes(), Want: Drop},
		{Name: "ipv6 double tagged", Frame: From("2001:db8::1", ICMP, Double...).Bytes(), Times: 3, Want: Drop},
	}}.Run(t)
	assert.Equal(t, 2, res.Steps)
	assert.Len(t, res.Sent, 4)

	_, err := Scenario{Name: "needs a clock", Target: Target{Prog: dropProgram(t)}, Steps: []Step{
		{At: time.Second, Frame: From("198.18.0.1", TCP).Bytes(), Want: Drop},
	}}.Exec()
	assert.ErrorContains(t, err, "has no virtual clock")
}

// TestRunRefusesBadSizes: frames the kernel's test runner would refuse are
// refused before the syscall, with ErrFrameSize.
func TestRunRefusesBadSizes(t *testing.T) {
	testutil.Root(t)
	prog := dropProgram(t)
	for _, n := range []int{0, 1, MinFrame - 1, MaxFrame + 1} {
		_, err := Run(prog, make([]byte, n))
		assert.ErrorIs(t, err, ErrFrameSize, "Run(%d bytes)", n)
	}
	for _, n := range []int{MinFrame, 1500, MaxFrame} {
		got, err := Run(prog, make([]byte, n))
		require.NoError(t, err, "Run(%d bytes)", n)
		assert.Equal(t, Drop, got, "Run(%d bytes)", n)
	}
}
