package cli

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTokenFileFIFODoesNotBlock (issue 10, finding 7): a FIFO as token file
// held serve in open(), deaf to SIGTERM. It must be refused at once.
func TestTokenFileFIFODoesNotBlock(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "token")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	done := make(chan error, 1)
	go func() {
		_, err := readTokenFile(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorContains(t, err, "not a regular file", "readTokenFile(fifo) = %v, want a not-a-regular-file error", err)
	case <-time.After(2 * time.Second):
		require.Fail(t, "readTokenFile(fifo) still blocked after 2 s")
	}
}
