package testutil

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPool: nothing to take until something is given, values come back
// under their own key only, and each once.
func TestPool(t *testing.T) {
	var p Pool[int, string]
	_, ok := p.Take(1)
	require.False(t, ok, "Take from an empty pool")
	p.Give(1, "a")
	p.Give(2, "b")
	_, ok = p.Take(3)
	require.False(t, ok, "Take under a key nothing was given under")
	v, ok := p.Take(1)
	require.True(t, ok)
	require.Equal(t, "a", v)
	_, ok = p.Take(1)
	require.False(t, ok, "a value taken twice")
	v, ok = p.Take(2)
	require.True(t, ok)
	require.Equal(t, "b", v)
}
