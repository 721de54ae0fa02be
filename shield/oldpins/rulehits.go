package oldpins

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// RuleHitsPin is where versions before rule_counts pinned the verdict
// entries' hit counters: a per-CPU array of one counter per rule
// (list_value.rule), which a load spent most of its time allocating.
const RuleHitsPin = "rule_hits"

// ReadRuleHits reads the old pinned hit counters of rules rs, each summed
// over the CPUs; ok is false when dir holds none. A rule the old array
// does not have reads as 0.
func ReadRuleHits(dir string, rs []uint32) (hits map[uint32]uint64, ok bool, err error) {
	path := filepath.Join(dir, RuleHitsPin)
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer m.Close()
	if m.Type() != ebpf.PerCPUArray || m.KeySize() != 4 || m.ValueSize() != 8 {
		return nil, false, fmt.Errorf("%s: a %v of %d-byte values, not the per-CPU counters this version reads", path, m.Type(), m.ValueSize())
	}
	hits = make(map[uint32]uint64, len(rs))
	var per []uint64
	for _, r := range rs {
		if r >= m.MaxEntries() {
			continue
		}
		if err := m.Lookup(r, &per); err != nil {
			return nil, false, fmt.Errorf("read %s[%d]: %w", path, r, err)
		}
		for _, n := range per {
			hits[r] += n
		}
	}
	return hits, true, nil
}

// RemoveRuleHits unpins the old hit counters once their counts are
// carried over (a program still attached keeps its own reference).
func RemoveRuleHits(dir string) error {
	if err := os.Remove(filepath.Join(dir, RuleHitsPin)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin the old hit counters: %w", err)
	}
	return nil
}
