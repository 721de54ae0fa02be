package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestHold: on a kernel that registers a test-run program with the XDP
// dispatcher per run, Run leaves the program it ran attached (in driver
// mode, in the hold namespace) and moves the hold to the next program it
// runs; on a newer kernel it attaches nothing. Without the hold, 5.10
// under TCG spends about 0.8 ms per run re-patching the dispatcher.
func TestHold(t *testing.T) {
	testutil.Root(t)
	a, b := dropProgram(t), dropProgram(t)
	frame := make([]byte, 64)
	for _, p := range []struct {
		name string
		prog any
	}{{"first", a}, {"second", b}, {"first again", a}} {
		prog := a
		if p.prog == b {
			prog = b
		}
		got, err := Run(prog, frame)
		require.NoError(t, err, "%s: Run()", p.name)
		require.Equal(t, Drop, got, "%s: Run()", p.name)
		holder.Lock()
		held, l, herr := holder.prog, holder.link, holdErr
		holder.Unlock()
		if !holdWanted() {
			assert.Nil(t, l, "%s: a hold on a kernel that needs none", p.name)
			continue
		}
		require.NotNil(t, l, "%s: nothing held on a kernel that re-patches the dispatcher per run: %v", p.name, herr)
		assert.Same(t, prog, held, "%s: the hold is not on the program just run", p.name)
		info, err := l.Info()
		require.NoError(t, err, "%s: link info", p.name)
		pinfo, err := prog.Info()
		require.NoError(t, err)
		id, _ := pinfo.ID()
		assert.Equal(t, id, info.Program, "%s: the held link runs another program", p.name)
	}
}
