package parts

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/xdpshield/xdpshield/internal/flock"
)

// stormLock is the file whose flock serialises storms (and the study's
// measurements) across processes: a storm's latency budget, or a study's
// throughput, means nothing while another storm shares the machine's cores.
var stormLock = flock.StormLockPath()

// LockStorms waits (until ctx is done) for no other storm to run on the
// machine and returns the release. The kernel drops the lock of a process
// that dies.
func LockStorms(ctx context.Context, log *slog.Logger) (func(), error) {
	began, waited := time.Now(), false
	_, unlock, err := flock.Take(ctx, []string{stormLock}, 0o600, func() {
		waited = true
		log.Info("another storm runs on this machine; waiting for it to end", "lock", stormLock)
	})
	if err != nil {
		return nil, fmt.Errorf("storm lock: %w", err)
	}
	if waited {
		log.Info("storm lock taken", "waited", time.Since(began).Round(time.Millisecond).String())
	}
	return unlock, nil
}
