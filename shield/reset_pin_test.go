package shield

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestResetRefusesPinned: a pinned shield's maps are the service's
// state, shared with the program attached; Reset leaves them alone.
func TestResetRefusesPinned(t *testing.T) {
	s := loadT(t, Options{PinPath: pinDir(t), TableSize: 1024, Clock: ClockVirtual})
	require.ErrorContains(t, s.Reset(Limits{}), "pinned")
}
