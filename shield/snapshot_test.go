package shield

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// TestReadsDoNotBlockWrites (issue 10, finding 5): with 65,536 deny
// entries, reading the list took the shield's mutex for the whole walk of
// the trie, so a change waited behind every reader. A List must complete
// while the lock every change takes (s.mu) is held, and changes must go on
// beside a reader listing in a loop. No clock judges it: a bound on the
// ratio of medians (busy against alone, 10x + 1 ms) failed once on a
// loaded machine (14.5 ms against 1.2 ms), where a change waited for a CPU.
// The subject is the Go side's locking; the tries' walks and updates it
// drives are proven on every kernel by the lists' own tests, so the VM
// matrix leaves it to the host (10.5 s a kernel under TCG).
func TestReadsDoNotBlockWrites(t *testing.T) {
	testutil.HostOnly(t, "List and changes under the Go side's locks")
	s := loadT(t, Options{})
	deny := make([]netip.Prefix, 0, lists.MaxEntries)
	for i := range lists.MaxEntries {
		deny = append(deny, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32))
	}
	_, err := s.Add(lists.DenyList, deny)
	require.NoError(t, err)

	s.mu.Lock()
	done := make(chan int, 1)
	go func() {
		ps, err := s.List(lists.DenyList)
		assert.NoError(t, err, "List(deny) under the changes' lock")
		done <- len(ps)
	}()
	select {
	case n := <-done:
		s.mu.Unlock()
		require.Equal(t, lists.MaxEntries, n, "List(deny) under the changes' lock")
	case <-time.After(30 * time.Second):
		s.mu.Unlock()
		require.FailNow(t, "List(deny) waited 30 s on the lock changes take")
	}

	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			ps, err := s.List(lists.DenyList)
			if !assert.NoError(t, err) || !assert.Len(t, ps, lists.MaxEntries, "List(deny)") {
				return
			}
			reads.Add(1)
		}
	}()
	l := config.DefaultLimits()
	start := time.Now()
	for i := range 20 {
		l.Rate = uint64(1000 + i)
		require.NoError(t, s.SetLimits(l))
	}
	stop.Store(true)
	wg.Wait()
	require.NotZero(t, reads.Load(), "the reader never completed a lists.List")
	assert.Equal(t, uint64(1019), s.Limits().Rate, "the last change beside the reader")
	t.Logf("20 changes beside a reader took %v; %d lists of %d read meanwhile", time.Since(start), reads.Load(), lists.MaxEntries)
}
