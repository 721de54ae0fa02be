package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// stormLock is the file whose flock serialises storms (and the study's
// measurements) across processes: a storm's latency budget, or a study's
// throughput, means nothing while another storm shares the machine's cores.
var stormLock = filepath.Join(os.TempDir(), "xdpshield-storm.lock")

// LockStorms waits (until ctx is done) for no other storm to run on the
// machine and returns the release. The kernel drops the lock of a process
// that dies.
func LockStorms(ctx context.Context, log *slog.Logger) (func(), error) {
	f, err := os.OpenFile(stormLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("storm lock: %w", err)
	}
	waited := false
	began := time.Now()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("storm lock %s: %w", stormLock, err)
		}
		if !waited {
			log.Info("another storm runs on this machine; waiting for it to end", "lock", stormLock)
			waited = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if waited {
		log.Info("storm lock taken", "waited", time.Since(began).Round(time.Millisecond).String())
	}
	return func() { f.Close() }, nil
}
