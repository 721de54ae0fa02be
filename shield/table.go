package shield

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/source"
)

// MinTableSize is the smallest table: one set.
const MinTableSize = uint32(source.Ways)

// CheckTableSize says why n cannot be a table size, or nil: the table is
// 2^k sets of ways ways, so n is a power of two in [MinTableSize,
// MaxTableSize].
func CheckTableSize(n uint32) error {
	if n < MinTableSize || n > MaxTableSize {
		return fmt.Errorf("table size %d out of range [%d, %d]", n, MinTableSize, MaxTableSize)
	}
	if n&(n-1) != 0 {
		lo := uint32(1) << (bits.Len32(n) - 1)
		return fmt.Errorf("table size %d is not a power of two (the table is 2^k sets of %d sources): %d or %d", n, uint32(source.Ways), lo, min(2*lo, MaxTableSize))
	}
	return nil
}

// SetOf is the set of s's table that a's source lives in (the keyed hash
// of its key under the limits in force): tests predict with it which
// sources share a set.
func (s *Shield) SetOf(a netip.Addr) uint32 {
	k := source.Key(a, s.Limits())
	return source.SetOf(source.HashOf(&k, &s.hashKeys), s.setBits)
}

// slotOf mirrors slot_of: a hash's slot in the presence filter.
func slotOf(h uint64) uint32 { return uint32(h >> (64 - filterLog2)) }

// tableSets maps the sources table (BPF_F_MMAPABLE) once, read and write.
func (s *Shield) tableSets() ([]bpf.ShieldSourceSet, error) {
	s.tableMu.Lock()
	defer s.tableMu.Unlock()
	if s.table != nil {
		return s.table, nil
	}
	if s.tableClosed {
		return nil, errors.New("the shield is closed")
	}
	n := int(s.objs.Sources.MaxEntries())
	b, err := unix.Mmap(s.objs.Sources.FD(), 0, n*source.SetSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the sources table: %w", err)
	}
	s.tableMap = b
	s.table = unsafe.Slice((*bpf.ShieldSourceSet)(unsafe.Pointer(&b[0])), n)
	return s.table, nil
}

// readTable returns the mapped table read-locked: it stays mapped (Close
// waits) until release is called.
func (s *Shield) readTable() (sets []bpf.ShieldSourceSet, release func(), err error) {
	if _, err := s.tableSets(); err != nil {
		return nil, nil, err
	}
	s.tableMu.RLock()
	if s.table == nil {
		s.tableMu.RUnlock()
		return nil, nil, errors.New("the shield is closed")
	}
	return s.table, s.tableMu.RUnlock, nil
}

// Table is a sources table pinned by a running shield, opened by another
// process (tests fill it): its mapping and the hash that places sources.
// Sources put here do not set the presence filter's bits: until a refresh
// (Shield.RefreshFilter) the program may take them for strangers.
type Table struct {
	sets    []bpf.ShieldSourceSet
	mapping []byte
	keys    [5]uint64
	bits    uint32
	limits  config.Limits
}

// OpenTable opens the sources table pinned in pin directory dir.
func OpenTable(dir string) (*Table, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.ShieldMapSources), nil)
	if err != nil {
		return nil, fmt.Errorf("open the pinned sources table: %w", err)
	}
	defer m.Close()
	if m.Type() != ebpf.Array || m.ValueSize() != uint32(source.SetSize) {
		return nil, fmt.Errorf("the sources table pinned in %s is not this version's (%s, value size %d)", dir, m.Type(), m.ValueSize())
	}
	seed, ok, err := pinnedSeed(dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no configuration pinned in %s", dir)
	}
	cm, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.ShieldMapConfigMap), nil)
	if err != nil {
		return nil, fmt.Errorf("open the pinned configuration: %w", err)
	}
	cfg, _, err := readConfigOf(cm)
	cm.Close()
	if err != nil {
		return nil, err
	}
	n := int(m.MaxEntries())
	b, err := unix.Mmap(m.FD(), 0, n*source.SetSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the sources table: %w", err)
	}
	return &Table{
		sets:    unsafe.Slice((*bpf.ShieldSourceSet)(unsafe.Pointer(&b[0])), n),
		mapping: b,
		keys:    source.HashKeys(seed),
		bits:    uint32(bits.TrailingZeros32(uint32(n))),
		limits:  config.LimitsOf(cfg, nil),
	}, nil
}

// ErrSetFull says a source's set has no way free for it.
var ErrSetFull = errors.New("the source's set is full")

// Put writes source v (its Passed without the used mark) with key k into
// the set k hashes to: over k's way, or into an empty one; it replaces no
// other source (ErrSetFull).
func (t *Table) Put(k bpf.ShieldSrcKey, v bpf.ShieldSource) error {
	set := &t.sets[source.SetOf(source.HashOf(&k, &t.keys), t.bits)]
	if source.FindWay(set, &k) == nil && source.HeldBy(set) == len(set.Way) {
		return ErrSetFull
	}
	source.Place(set, k, v, t.limits, 0)
	return nil
}

// Close unmaps the table (a Shield's own, from Shield.Table, stays mapped).
func (t *Table) Close() error {
	if t.mapping == nil {
		return nil
	}
	return unix.Munmap(t.mapping)
}

// Table is a view of s's own sources table, valid until s is closed.
func (s *Shield) Table() (*Table, error) {
	sets, err := s.tableSets()
	if err != nil {
		return nil, err
	}
	return &Table{sets: sets, keys: s.hashKeys, bits: s.setBits, limits: s.Limits()}, nil
}

// putSource places source v with key k in s's table (see place) and sets
// its bits in both presence filters, as the program does after an
// insertion.
func (s *Shield) putSource(k bpf.ShieldSrcKey, v bpf.ShieldSource, now uint64) (replaced bool, err error) {
	sets, err := s.tableSets()
	if err != nil {
		return false, err
	}
	words, err := s.presenceWords()
	if err != nil {
		return false, err
	}
	return s.placeIn(sets, words, k, v, s.Limits(), now), nil
}

// placeIn is putSource on the mapped table sets and presence words, under
// limits l.
func (s *Shield) placeIn(sets []bpf.ShieldSourceSet, words []uint64, k bpf.ShieldSrcKey, v bpf.ShieldSource, l config.Limits, now uint64) (replaced bool) {
	h := source.HashOf(&k, &s.hashKeys)
	replaced = source.Place(&sets[source.SetOf(h, s.setBits)], k, v, l, now)
	slot := slotOf(h)
	for f := range uint32(2) {
		atomic.OrUint64(&words[f*filterWords+slot/64], 1<<(slot%64))
	}
	return replaced
}
