package main

import (
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReloadWithoutConfig: a serve started with flags alone has no file
// to reload; SIGHUP is refused and logged, and the limits changed
// through the API stay (reloading the flags would put the defaults
// back). The service keeps running.
func TestReloadWithoutConfig(t *testing.T) {
	l := newLab(t, "rlnc")
	s := l.serve(t)
	ctx := context.Background()
	lim, err := l.client.Limits(ctx)
	require.NoError(t, err)
	lim.Rate = 77
	_, err = l.client.SetLimits(ctx, lim)
	require.NoError(t, err)
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
	s.waitLog(t, "reload refused; nothing was changed")
	require.Contains(t, s.out.String(), "there is no file to reload")
	got, err := l.client.Limits(ctx)
	require.NoError(t, err, "the API after SIGHUP")
	require.Equal(t, uint64(77), got.Rate, "limits after SIGHUP")
}
