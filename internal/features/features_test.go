package features

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestOff: SHIELD_FEATURES_OFF makes a probe fail as a refusing kernel
// does (EPERM), naming the feature, and Present reports it.
func TestOff(t *testing.T) {
	t.Setenv(Env, "probe_off_test")
	f := &Feature{Name: "probe_off_test", probe: func() error { return nil }}
	err := f.Check()
	var m *Missing
	require.ErrorAs(t, err, &m)
	assert.Equal(t, unix.EPERM, m.Errno)
	assert.True(t, errors.Is(err, unix.EPERM))
	assert.Contains(t, err.Error(), "kernel feature probe_off_test unavailable (EPERM)")
	g := &Feature{Name: "other", probe: func() error { return nil }}
	assert.NoError(t, g.Check(), "a feature not named in %s", Env)
}
