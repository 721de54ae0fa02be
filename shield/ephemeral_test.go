package shield

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield/config"
)

// TestEphemeralFollowsTheNamespace: the ephemeral range is the loading
// namespace's, not configuration: a load adopting pins written with
// another range (or before there was one: 0, 0) writes its own, and
// SetEphemeral changes it in the configuration the program reads.
func TestEphemeralFollowsTheNamespace(t *testing.T) {
	testutil.Root(t)
	dir := pinDir(t)
	first := config.PortRange{Lo: 20000, Hi: 29999}
	s, err := Load(Options{TableSize: MinTableSize, Clock: config.ClockVirtual, PinPath: dir, Ephemeral: first})
	require.NoError(t, err)
	cfg, _, err := s.readConfig()
	require.NoError(t, err)
	assert.Equal(t, first, config.PortRange{Lo: cfg.EphLo, Hi: cfg.EphHi}, "range in the config map")
	require.NoError(t, s.Close())

	s, err = Load(Options{TableSize: MinTableSize, Clock: config.ClockVirtual, PinPath: dir})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, config.DefaultEphemeral, s.Ephemeral(), "Ephemeral() after adopting pins of another range")
	cfg, _, err = s.readConfig()
	require.NoError(t, err)
	assert.Equal(t, config.DefaultEphemeral, config.PortRange{Lo: cfg.EphLo, Hi: cfg.EphHi}, "adopted config map's range")

	next := config.PortRange{Lo: 1024, Hi: 65535}
	require.NoError(t, s.SetEphemeral(next))
	cfg, _, err = s.readConfig()
	require.NoError(t, err)
	assert.Equal(t, next, config.PortRange{Lo: cfg.EphLo, Hi: cfg.EphHi}, "range in the config map after SetEphemeral")
	assert.ErrorIs(t, s.SetEphemeral(config.PortRange{Lo: 2, Hi: 1}), config.ErrInvalid, "SetEphemeral(2-1)")
	assert.Equal(t, next, s.Ephemeral(), "Ephemeral() after a refused change")
}
