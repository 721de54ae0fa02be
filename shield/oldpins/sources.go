package oldpins

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

// SourcesPin is where TakeSources moves a pinned sources table Load cannot
// use (another layout or size) while its sources are copied into a new
// one; a load that finds it (an earlier one stopped halfway) copies from
// it again.
const SourcesPin = "sources-old"

// LRUSource is the value of the sources table before it was an array of
// sets: an LRU hash keyed by struct src_key.
type LRUSource struct {
	LastNs, Credit                       uint64 // bucket
	UnprotectedLastNs, UnprotectedCredit uint64 // unprotected
	Passed, Dropped                      uint64
}

// Source is v with key k, in this version's layout.
func (v *LRUSource) Source(k bpf.ShieldSrcKey) bpf.ShieldSource {
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

// TakeSources finds a pinned sources table in dir that spec cannot reuse,
// moves its pin to SourcesPin and returns it open, or returns one pinned
// there already; nil when there is none. moved says it moved the pin (a
// refused load moves it back: PutBackSources).
func TakeSources(dir string, spec *ebpf.MapSpec) (_ *ebpf.Map, moved bool, _ error) {
	p, po := filepath.Join(dir, bpf.ShieldMapSources), filepath.Join(dir, SourcesPin)
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
	if err := readable(m); err != nil {
		m.Close()
		return nil, false, fmt.Errorf("the sources table pinned in %s: %w: `shield detach` drops it and its state", dir, err)
	}
	if err := os.Rename(p, po); err != nil {
		m.Close()
		return nil, false, fmt.Errorf("move the pinned sources table aside: %w", err)
	}
	return m, true, nil
}

// PutBackSources moves the table TakeSources moved aside in dir back (over
// a new table a refused load may have pinned: it is empty), so the old
// program stays attached on its table.
func PutBackSources(dir string) error {
	return os.Rename(filepath.Join(dir, SourcesPin), filepath.Join(dir, bpf.ShieldMapSources))
}

// RemoveSources unpins the table moved aside in dir once its sources are
// copied.
func RemoveSources(dir string) error {
	if err := os.Remove(filepath.Join(dir, SourcesPin)); err != nil {
		return fmt.Errorf("remove the old sources table's pin: %w", err)
	}
	return nil
}

// readable says why the sources of m cannot be read, or nil.
func readable(m *ebpf.Map) error {
	switch {
	case m.Type() == ebpf.LRUHash && m.KeySize() == 16 && m.ValueSize() == 48:
		return nil
	case m.Type() == ebpf.Array && m.ValueSize() == uint32(source.SetSize):
		return nil
	}
	return fmt.Errorf("a layout this version cannot read (%s, key %d bytes, value %d bytes)", m.Type(), m.KeySize(), m.ValueSize())
}

// ReadSources reads every source of old (an LRU hash of the former layout,
// or a table of another size), the most recently seen last, so that a copy
// in this order keeps the most recent ones of a full set; from names the
// old table for Migration.From.
func ReadSources(old *ebpf.Map) (srcs []bpf.ShieldSource, from string, err error) {
	srcs, from, err = readSources(old)
	if err != nil {
		return nil, from, err
	}
	slices.SortFunc(srcs, func(a, b bpf.ShieldSource) int { return cmp.Compare(lastUse(&a), lastUse(&b)) })
	return srcs, from, nil
}

// lastUse is when a source last passed a packet: its buckets' latest refill.
func lastUse(v *bpf.ShieldSource) uint64 { return max(v.Bucket.LastNs, v.Unprotected.LastNs) }

func readSources(old *ebpf.Map) ([]bpf.ShieldSource, string, error) {
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
	vals := make([]LRUSource, 4096)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := old.BatchLookup(&cursor, keys, vals, nil)
		if errors.Is(err, ebpf.ErrNotSupported) && len(out) == 0 && n == 0 {
			break
		}
		for i := range n {
			out = append(out, vals[i].Source(keys[i]))
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, from, nil
		}
		if err != nil {
			return nil, from, err
		}
	}
	var k bpf.ShieldSrcKey
	var v LRUSource
	it := old.Iterate()
	for it.Next(&k, &v) {
		out = append(out, v.Source(k))
	}
	return out, from, it.Err()
}
