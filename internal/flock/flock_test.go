package flock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// Take takes the first free lock, waits while all are held (calling onWait
// once), gives up when its context ends, and takes a lock once it is freed.
func TestTake(t *testing.T) {
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	i, ua, err := Take(context.Background(), paths, 0o600, nil)
	if err != nil || i != 0 {
		t.Fatalf("Take(both free) = %d, %v; want 0", i, err)
	}
	i, ub, err := Take(context.Background(), paths, 0o600, nil)
	if err != nil || i != 1 {
		t.Fatalf("Take(a held) = %d, %v; want 1", i, err)
	}
	waits := 0
	ctx, cancel := context.WithTimeout(context.Background(), 3*Poll)
	defer cancel()
	if _, _, err := Take(ctx, paths, 0o600, func() { waits++ }); !errors.Is(err, context.DeadlineExceeded) || waits != 1 {
		t.Errorf("Take(all held) = %v after %d waits; want the context's deadline after 1", err, waits)
	}
	go func() { time.Sleep(2 * Poll); ub() }()
	i, uc, err := Take(context.Background(), paths, 0o600, nil)
	if err != nil || i != 1 {
		t.Fatalf("Take(b freed) = %d, %v; want 1", i, err)
	}
	ua()
	uc()
}
