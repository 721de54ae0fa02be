package shield

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/source"
)

// oldSourcesPin is where Load moves a pinned sources table it cannot use
// (another layout or size) while it copies the sources into a new one; a
// load that finds it (an earlier one stopped halfway) copies from it again.
const oldSourcesPin = "sources-old"

// lruSource is the value of the sources table before it was an array of
// sets: an LRU hash keyed by struct src_key.
type lruSource struct {
	LastNs, Credit                       uint64 // bucket
	UnprotectedLastNs, UnprotectedCredit uint64 // unprotected
	Passed, Dropped                      uint64
}

// source is v with key k, in this version's layout.
func (v *lruSource) source(k bpf.ShieldSrcKey) bpf.ShieldSource {
	return bpf.ShieldSource{Key: k,
		Bucket:      bpf.ShieldBucket{LastNs: v.LastNs, Credit: int64(v.Credit)},
		Unprotected: bpf.ShieldBucket{LastNs: v.UnprotectedLastNs, Credit: int64(v.UnprotectedCredit)},
		Passed:      v.Passed, Dropped: v.Dropped}
}

// Migration says what Load copied from a pinned sources table it could not
// use as it was.
type Migration struct {
	From     string // the old table: "LRU hash of 1048576" or "table of 65536"
	To       uint32 // the new table's size
	Sources  int    // sources it held
	Moved    int    // sources copied into the new table
	Replaced int    // sources left out: their set was full of more recent ones
}

func (m *Migration) String() string {
	return fmt.Sprintf("pinned sources table (%s) copied into a table of %d in this version's layout: %d of %d sources copied, %d left out (their set held %d more recently seen)",
		m.From, m.To, m.Moved, m.Sources, m.Replaced, uint32(source.Ways))
}

// Migrated says what Load copied from a pinned sources table of another
// layout or size, if it did.
func (s *Shield) Migrated() (Migration, bool) {
	if s.migrated == nil {
		return Migration{}, false
	}
	return *s.migrated, true
}

// takeOldSources finds a pinned sources table in dir that spec cannot
// reuse, moves its pin to oldSourcesPin and returns it open, or returns one
// pinned there already; nil when there is none. moved says it moved the
// pin (a refused load moves it back).
func takeOldSources(dir string, spec *ebpf.MapSpec) (_ *ebpf.Map, moved bool, _ error) {
	p, po := filepath.Join(dir, bpf.ShieldMapSources), filepath.Join(dir, oldSourcesPin)
	if old, err := ebpf.LoadPinnedMap(po, nil); err == nil {
		// A copy cut short: the table at p is its partial target, which
		// no attached program uses (the link is replaced after the copy).
		// One this spec cannot reuse (table_size changed since) is dropped.
		if m, err := ebpf.LoadPinnedMap(p, nil); err == nil {
			incompatible := spec.Compatible(m) != nil
			m.Close()
			if incompatible {
				if err := os.Remove(p); err != nil {
					old.Close()
					return nil, false, fmt.Errorf("remove the partial copy's table: %w", err)
				}
			}
		}
		return old, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("open %s: %w", po, err)
	}
	m, err := ebpf.LoadPinnedMap(p, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", p, err)
	}
	if spec.Compatible(m) == nil {
		m.Close()
		return nil, false, nil
	}
	if err := readableOld(m); err != nil {
		m.Close()
		return nil, false, fmt.Errorf("the sources table pinned in %s: %w: `shield detach` drops it and its state", dir, err)
	}
	if err := os.Rename(p, po); err != nil {
		m.Close()
		return nil, false, fmt.Errorf("move the pinned sources table aside: %w", err)
	}
	return m, true, nil
}

// readableOld says why the sources of m cannot be read, or nil.
func readableOld(m *ebpf.Map) error {
	switch {
	case m.Type() == ebpf.LRUHash && m.KeySize() == 16 && m.ValueSize() == 48:
		return nil
	case m.Type() == ebpf.Array && m.ValueSize() == uint32(source.SetSize):
		return nil
	}
	return fmt.Errorf("a layout this version cannot read (%s, key %d bytes, value %d bytes)", m.Type(), m.KeySize(), m.ValueSize())
}

// migrate copies the sources of old (an LRU hash of the former layout, or
// a table of another size) into s's table, the most recently seen last so
// that a full set keeps the most recent ones, and sets their bits in both
// presence filters; then it removes the pin of old in dir.
func (s *Shield) migrate(old *ebpf.Map, dir string) error {
	defer old.Close()
	srcs, from, err := readOld(old)
	if err != nil {
		return fmt.Errorf("read the old sources table: %w", err)
	}
	slices.SortFunc(srcs, func(a, b bpf.ShieldSource) int { return cmp.Compare(lastUse(&a), lastUse(&b)) })
	now, err := s.ClockNow()
	if err != nil {
		return err
	}
	sets, err := s.tableSets()
	if err != nil {
		return err
	}
	words, err := s.presenceWords()
	if err != nil {
		return err
	}
	l := s.Limits()
	mig := &Migration{From: from, To: s.TableSize(), Sources: len(srcs)}
	for i := range srcs {
		if s.placeIn(sets, words, srcs[i].Key, srcs[i], l, now) {
			mig.Replaced++
		}
	}
	mig.Moved = mig.Sources - mig.Replaced
	if err := os.Remove(filepath.Join(dir, oldSourcesPin)); err != nil {
		return fmt.Errorf("remove the old sources table's pin: %w", err)
	}
	s.migrated = mig
	return nil
}

// lastUse is when a source last passed a packet: its buckets' latest refill.
func lastUse(v *bpf.ShieldSource) uint64 { return max(v.Bucket.LastNs, v.Unprotected.LastNs) }

// readOld reads every source of old.
func readOld(old *ebpf.Map) ([]bpf.ShieldSource, string, error) {
	var out []bpf.ShieldSource
	if old.Type() == ebpf.Array {
		var k uint32
		var set bpf.ShieldSourceSet
		var scratch bpf.ShieldSource
		it := old.Iterate()
		for it.Next(&k, &set) {
			source.VisitSet(&set, &scratch, func(_ *bpf.ShieldSrcKey, v *bpf.ShieldSource) { out = append(out, *v) })
		}
		return out, fmt.Sprintf("table of %d", old.MaxEntries()*uint32(source.Ways)), it.Err()
	}
	from := fmt.Sprintf("LRU hash of %d", old.MaxEntries())
	keys := make([]bpf.ShieldSrcKey, 4096)
	vals := make([]lruSource, 4096)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := old.BatchLookup(&cursor, keys, vals, nil)
		if errors.Is(err, ebpf.ErrNotSupported) && len(out) == 0 && n == 0 {
			break
		}
		for i := range n {
			out = append(out, vals[i].source(keys[i]))
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, from, nil
		}
		if err != nil {
			return nil, from, err
		}
	}
	var k bpf.ShieldSrcKey
	var v lruSource
	it := old.Iterate()
	for it.Next(&k, &v) {
		out = append(out, v.source(k))
	}
	return out, from, it.Err()
}
