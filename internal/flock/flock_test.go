package flock

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Take takes the first free lock, waits while all are held (calling onWait
// once), gives up when its context ends, and takes a lock once it is freed.
func TestTake(t *testing.T) {
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	i, ua, err := Take(context.Background(), paths, 0o600, nil)
	require.NoError(t, err, "Take(both free)")
	require.Equal(t, 0, i, "Take(both free)")
	i, ub, err := Take(context.Background(), paths, 0o600, nil)
	require.NoError(t, err, "Take(a held)")
	require.Equal(t, 1, i, "Take(a held)")
	waits := 0
	ctx, cancel := context.WithTimeout(context.Background(), 3*Poll)
	defer cancel()
	_, _, err = Take(ctx, paths, 0o600, func() { waits++ })
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Take(all held)")
	assert.Equal(t, 1, waits, "Take(all held): waits")
	go func() { time.Sleep(2 * Poll); ub() }()
	i, uc, err := Take(context.Background(), paths, 0o600, nil)
	require.NoError(t, err, "Take(b freed)")
	require.Equal(t, 1, i, "Take(b freed)")
	ua()
	uc()
}
