package shield

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/shield/oldpins"
)

// ruleCounts is rule_counts mapped (BPF_F_MMAPABLE): CPU c counts rule r
// at counts[c*maxRules+r]. The API sums rules while a list change zeroes
// others; mu lets Close unmap it only once no reader holds it.
type ruleCounts struct {
	mu     sync.RWMutex
	counts []uint64 // nil before mapFrom and after close
	mapped []byte
}

var errCountsClosed = errors.New("the hit counters are closed")

// mapFrom maps m, rule_counts.
func (c *ruleCounts) mapFrom(m *ebpf.Map) error {
	n := int(m.MaxEntries())
	b, err := unix.Mmap(m.FD(), 0, n*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the hit counters: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mapped, c.counts = b, unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n)
	return nil
}

// close unmaps the counters once no reader holds them.
func (c *ruleCounts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mapped != nil {
		unix.Munmap(c.mapped)
	}
	c.mapped, c.counts = nil, nil
}

// set sets rule r's counters to n on the first CPU and 0 on the others;
// c.mu is held.
func (c *ruleCounts) set(r uint32, n uint64) {
	for cpu := 0; cpu < len(c.counts); cpu += int(maxRules) {
		atomic.StoreUint64(&c.counts[cpu+int(r)], n)
		n = 0
	}
}

// zero zeroes the counters of rules rs on every CPU.
func (c *ruleCounts) zero(rs []uint32) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.counts == nil {
		return errCountsClosed
	}
	for _, r := range rs {
		c.set(r, 0)
	}
	return nil
}

// sums is each rule's count summed over the CPUs (0 for noRule).
func (c *ruleCounts) sums(rs []uint32) ([]uint64, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.counts == nil {
		return nil, errCountsClosed
	}
	out := make([]uint64, len(rs))
	for i, r := range rs {
		if r >= maxRules {
			continue
		}
		for cpu := 0; cpu < len(c.counts); cpu += int(maxRules) {
			out[i] += atomic.LoadUint64(&c.counts[cpu+int(r)])
		}
	}
	return out, nil
}

// carryRuleHits carries the counts of the rules in force over from the
// hit counters an earlier version pinned (oldpins.ReadRuleHits), and says
// whether there were any: Load unpins them once it is done. Each carried
// rule's count is set, the old sum on the first CPU and 0 on the others,
// so a load that stops before the unpin and runs again carries the same
// counts; what the old program still attached counts until the new one
// replaces it is not carried.
func (s *Shield) carryRuleHits() (bool, error) {
	if s.pinPath == "" {
		return false, nil
	}
	var rs []uint32
	if p := s.rules.Load(); p != nil {
		for _, r := range *p {
			if r < maxRules {
				rs = append(rs, r)
			}
		}
	}
	hits, ok, err := oldpins.ReadRuleHits(s.pinPath, rs)
	if !ok || err != nil {
		return false, err
	}
	s.hits.mu.RLock()
	defer s.hits.mu.RUnlock()
	for _, r := range rs {
		s.hits.set(r, hits[r])
	}
	return true, nil
}
