package workbench

import (
	"context"

	"github.com/xdpshield/xdpshield/internal/flock"
)

// takeLock holds path as another storm's process would (parts.LockStorms).
func takeLock(path string) (int, func(), error) {
	return flock.Take(context.Background(), []string{path}, 0o600, nil)
}
