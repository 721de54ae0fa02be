package lb

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
)

// lruLB loads a balancer (not attached) whose state is in the fallback's
// LRU of size entries.
func lruLB(t *testing.T, size uint32) *LB {
	t.Helper()
	l, err := Load(Options{ReverseSize: size, state: StateLRU})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// fillReverse puts n entries (cookies 1..n, empty state) in the LRU.
func fillReverse(t *testing.T, l *LB, n int) {
	t.Helper()
	keys := make([]uint64, n)
	vals := make([]bpf.LbSockLb, n)
	for i := range keys {
		keys[i] = uint64(i + 1)
	}
	_, err := l.objs.Reverse.BatchUpdate(keys, vals, nil)
	require.NoError(t, err)
}
