package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLogLimiter: ten lines at once, then one a second, each saying how
// many were held back before it.
func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 10 {
		n, ok := l.allow(t0)
		require.True(t, ok, "line %d of the burst", i)
		require.Zero(t, n)
	}
	for range 3 {
		_, ok := l.allow(t0.Add(100 * time.Millisecond))
		require.False(t, ok, "past the burst")
	}
	n, ok := l.allow(t0.Add(time.Second))
	require.True(t, ok, "a second later")
	require.Equal(t, 3, n, "held back")
	_, ok = l.allow(t0.Add(time.Second))
	require.False(t, ok, "the second's one line is spent")
	n, ok = l.allow(t0.Add(time.Hour))
	require.True(t, ok)
	require.Equal(t, 1, n)
	for i := range 9 {
		_, ok := l.allow(t0.Add(time.Hour))
		require.True(t, ok, "an hour later the burst is whole again (line %d)", i+2)
	}
	_, ok = l.allow(t0.Add(time.Hour))
	require.False(t, ok)
}
