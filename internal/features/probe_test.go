package features_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/kernel"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestProbesOnNewKernels: on a kernel past every feature's release each
// probe runs to an answer; a missing feature names itself and an errno (a
// kernel build may refuse one: that is a skip elsewhere, a fact here).
func TestProbesOnNewKernels(t *testing.T) {
	testutil.Root(t)
	for _, f := range features.All() {
		err := f.Check()
		if err == nil {
			continue
		}
		var m *features.Missing
		require.ErrorAs(t, err, &m, "%s.Check()", f.Name)
		assert.Equal(t, f.Name, m.Feature)
		t.Logf("%s on %s: %v", f.Name, kernel.Release(), err)
		major, minor, _ := kernel.Version(f.Since)
		if !kernel.AtLeast(major, minor) {
			continue
		}
		assert.NotZero(t, m.Errno, "%s is missing on %s without an errno: %v", f.Name, kernel.Release(), err)
	}
}
