package shield

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/source"
)

// The presence filter (presence in bpf/shield.c): two bitmaps of
// filterBits slots; config.filter names the one the program reads, and the
// program sets a new source's bit in both.
const (
	filterLog2  = 24
	filterBits  = 1 << filterLog2 // FILTER_BITS; TestContract checks the map's size
	filterWords = filterBits / 64
)

// newFilterSeed is a random seed for hash_of's keys (hashKeys).
func newFilterSeed() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("filter seed: %w", err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// presenceWords maps the presence map (BPF_F_MMAPABLE) once: both filters,
// filter f at [f*filterWords, (f+1)*filterWords).
func (s *Shield) presenceWords() ([]uint64, error) {
	if s.presence != nil {
		return s.presence, nil
	}
	b, err := unix.Mmap(s.objs.Presence.FD(), 0, 2*filterWords*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the presence filter: %w", err)
	}
	s.presenceMap = b
	s.presence = unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), 2*filterWords)
	return s.presence, nil
}

// FilterStats describes the presence filter.
type FilterStats struct {
	Filter  uint32  // the filter in force (0 or 1)
	Set     int     // its bits set
	Fill    float64 // Set / its bits: the share of strangers looked up in the table anyway
	Scanned int     // sources the last refresh walked (RefreshFilter only)
}

// Filter reads the presence filter in force: how full it is.
func (s *Shield) Filter() (FilterStats, error) {
	s.filterMu.Lock()
	defer s.filterMu.Unlock()
	return s.filterStats()
}

func (s *Shield) filterStats() (FilterStats, error) {
	words, err := s.presenceWords()
	if err != nil {
		return FilterStats{}, err
	}
	s.mu.Lock()
	f := s.filter
	s.mu.Unlock()
	n := 0
	ws := words[f*filterWords : (f+1)*filterWords]
	for i := range ws {
		n += bits.OnesCount64(atomic.LoadUint64(&ws[i]))
	}
	return FilterStats{Filter: f, Set: n, Fill: float64(n) / filterBits}, nil
}

// RefreshFilter rebuilds the presence filter from the sources table, so the
// bits of evicted sources no longer cost strangers a lookup: it clears the
// filter not in force, sets the bit of every source a walk of the table
// finds, then swaps the configuration to read it. No tracked source is
// missing from it: one the walk missed was inserted after the walk began,
// so after the clear, and the program set its bit in both filters. A walk
// of 1,000,000 sources reads the mapped table (BenchmarkTop's walk).
func (s *Shield) RefreshFilter(ctx context.Context) (FilterStats, error) {
	s.filterMu.Lock()
	defer s.filterMu.Unlock()
	words, err := s.presenceWords()
	if err != nil {
		return FilterStats{}, err
	}
	s.mu.Lock()
	next := 1 - s.filter
	s.mu.Unlock()
	mine := words[next*filterWords : (next+1)*filterWords]
	for i := range mine {
		atomic.StoreUint64(&mine[i], 0)
	}
	st, err := s.walkSources(ctx, func(k *bpf.ShieldSrcKey, _ *bpf.ShieldSource) {
		slot := slotOf(source.HashOf(k, &s.hashKeys))
		atomic.OrUint64(&mine[slot/64], 1<<(slot%64))
	})
	if err != nil {
		return FilterStats{}, fmt.Errorf("refresh the presence filter: %w", err)
	}
	if s.afterFilterWalk != nil {
		s.afterFilterWalk()
	}
	s.mu.Lock()
	s.filter = next
	err = s.publish(s.limits)
	s.mu.Unlock()
	if err != nil {
		return FilterStats{}, err
	}
	fs, err := s.filterStats()
	fs.Scanned = st.Scanned
	return fs, err
}
