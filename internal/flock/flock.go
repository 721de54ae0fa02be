// Package flock takes exclusive flock(2) locks that serialise work across
// processes (storms, VM slots), waiting as long as the caller's context
// allows. The kernel drops the lock of a process that dies.
package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Poll is how often Take tries again while every lock is held.
const Poll = 200 * time.Millisecond

// Take opens (creating, mode perm) each of paths and takes an exclusive
// flock on the first that is free, trying them again every Poll until one
// is or ctx ends. onWait, if not nil, is called once, when none was free at
// first. It returns the index of the path taken and the release.
func Take(ctx context.Context, paths []string, perm os.FileMode, onWait func()) (int, func(), error) {
	var files []*os.File
	closeAll := func(keep int) {
		for i, f := range files {
			if i != keep {
				f.Close()
			}
		}
	}
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, perm)
		if err != nil {
			closeAll(-1)
			return 0, nil, fmt.Errorf("lock %s: %w", p, err)
		}
		files = append(files, f)
	}
	for waited := false; ; waited = true {
		for i, f := range files {
			err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err == nil {
				closeAll(i)
				return i, func() { f.Close() }, nil
			}
			if !errors.Is(err, unix.EWOULDBLOCK) {
				closeAll(-1)
				return 0, nil, fmt.Errorf("lock %s: %w", f.Name(), err)
			}
		}
		if !waited && onWait != nil {
			onWait()
		}
		select {
		case <-ctx.Done():
			closeAll(-1)
			return 0, nil, ctx.Err()
		case <-time.After(Poll):
		}
	}
}

// StormLockPath is the file whose flock serialises storms (and the
// study's measurements) across processes: e2e/parts.LockStorms takes it, and
// the workbench checks it before it starts one.
func StormLockPath() string { return filepath.Join(os.TempDir(), "xdpshield-storm.lock") }
