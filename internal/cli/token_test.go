package cli

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTokenFileFIFODoesNotBlock (issue 10, finding 7): a FIFO as token file
// held serve in open(), deaf to SIGTERM. It must be refused at once.
func TestTokenFileFIFODoesNotBlock(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readTokenFile(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("readTokenFile(fifo) = %v, want a not-a-regular-file error", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("readTokenFile(fifo) still blocked after 2 s")
	}
}
