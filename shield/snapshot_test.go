package shield

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadsDoNotBlockWrites (issue 10, finding 5): with 65,536 deny
// entries, reading the list took the shield's mutex for the whole walk of
// the trie, so a change waited behind every reader. Changes beside a
// reader that lists in a loop must take about as long as changes alone
// (ratio of medians measured in this run).
func TestReadsDoNotBlockWrites(t *testing.T) {
	s := loadT(t, Options{})
	deny := make([]netip.Prefix, 0, maxListEntries)
	for i := range maxListEntries {
		deny = append(deny, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32))
	}
	if err := s.Add(DenyList, deny); err != nil {
		t.Fatal(err)
	}
	l := DefaultLimits()
	measure := func(n int) time.Duration {
		var ds []time.Duration
		for i := range n {
			l.Rate = uint64(1000 + i)
			start := time.Now()
			if err := s.SetLimits(l); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	alone := measure(20)

	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			ps, err := s.List(DenyList)
			if err != nil || len(ps) != maxListEntries {
				t.Errorf("List(deny) = %d prefixes, %v; want %d", len(ps), err, maxListEntries)
				return
			}
			reads.Add(1)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	busy := measure(20)
	stop.Store(true)
	wg.Wait()
	t.Logf("SetLimits median: %v alone, %v beside a reader (%d lists of %d read meanwhile)", alone, busy, reads.Load(), maxListEntries)
	if reads.Load() == 0 {
		t.Fatal("the reader never completed a List")
	}
	if busy > 10*alone+time.Millisecond {
		t.Errorf("SetLimits beside a reader: median %v, alone %v: changes wait for reads", busy, alone)
	}
}
