package shield

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
)

// TestResetRefusesPinned: a pinned shield's maps are the service's
// state, shared with the program attached; Reset leaves them alone.
func TestResetRefusesPinned(t *testing.T) {
	s := loadT(t, Options{PinPath: pinDir(t), TableSize: 1024, Clock: config.ClockVirtual})
	require.ErrorContains(t, s.Reset(config.Limits{}), "pinned")
}
