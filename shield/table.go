package shield

import (
	"encoding/binary"
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
)

// The sources table (sources in bpf/shield.c): an array of sets of ways
// ways, each way one source of 64 bytes. A source lives in the set its
// keyed hash names; user space reads the table through a memory mapping.
const (
	ways = uint32(len(bpf.ShieldSourceSet{}.Way)) // WAYS
	// sourceUsed marks a way holding a source, in its Passed (SOURCE_USED).
	sourceUsed = uint64(1) << 63
	// setSize is the bytes of one set (an element of the array).
	setSize = int(unsafe.Sizeof(bpf.ShieldSourceSet{}))
)

// Ways is how many sources a set of the table holds.
const Ways = int(ways)

// MinTableSize is the smallest table: one set.
const MinTableSize = ways

// CheckTableSize says why n cannot be a table size, or nil: the table is
// 2^k sets of ways ways, so n is a power of two in [MinTableSize,
// MaxTableSize].
func CheckTableSize(n uint32) error {
	if n < MinTableSize || n > MaxTableSize {
		return fmt.Errorf("table size %d out of range [%d, %d]", n, MinTableSize, MaxTableSize)
	}
	if n&(n-1) != 0 {
		lo := uint32(1) << (bits.Len32(n) - 1)
		return fmt.Errorf("table size %d is not a power of two (the table is 2^k sets of %d sources): %d or %d", n, ways, lo, min(2*lo, MaxTableSize))
	}
	return nil
}

// setBits is log2 of the sets of a table of n sources (set_bits).
func setBits(n uint32) uint32 { return uint32(bits.TrailingZeros32(n / ways)) }

// hashKeys derives hash_of's five keys from the configuration's random
// filter seed (splitmix64), so the seed kept in the pinned configuration
// names the hash of the table pinned beside it.
func hashKeys(seed uint64) [5]uint64 {
	var k [5]uint64
	x := seed
	for i := range k {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		k[i] = z ^ z>>31
	}
	return k
}

// hashOf mirrors hash_of in bpf/shield.c: the key's four 32-bit words as
// the (little-endian) program reads them, then the mix.
func hashOf(k *bpf.ShieldSrcKey, keys *[5]uint64) uint64 {
	h := keys[4]
	for i := range 4 {
		h += keys[i] * uint64(binary.LittleEndian.Uint32(k.Addr[4*i:]))
	}
	h ^= h >> 31
	return h * hashMix
}

// hashMix is HASH_MIX: an odd constant (splitmix64's first).
const hashMix = 0xbf58476d1ce4e5b9

// SetOf is the set of s's table that a's source lives in (the keyed hash
// of its key under the limits in force): tests predict with it which
// sources share a set.
func (s *Shield) SetOf(a netip.Addr) uint32 {
	k := sourceKey(a, s.Limits())
	return setOf(hashOf(&k, &s.hashKeys), s.setBits)
}

// slotOf mirrors slot_of: a hash's slot in the presence filter.
func slotOf(h uint64) uint32 { return uint32(h >> (64 - filterLog2)) }

// setOf mirrors set_of: a hash's set in a table of 2^bits sets.
func setOf(h uint64, bits uint32) uint32 { return uint32((h >> 32) >> (32 - bits)) }

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
	b, err := unix.Mmap(s.objs.Sources.FD(), 0, n*setSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
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

// used says whether way e holds a source.
func used(e *bpf.ShieldSource) bool { return e.Passed&sourceUsed != 0 }

// findWay returns the way of set holding k, or nil, as find() does.
func findWay(set *bpf.ShieldSourceSet, k *bpf.ShieldSrcKey) *bpf.ShieldSource {
	for i := range set.Way {
		if e := &set.Way[i]; used(e) && e.Key == *k {
			return e
		}
	}
	return nil
}

// visitSet calls fn for every source of set with a copy of its way in
// *scratch (one per walk: a copy per source would escape to the heap), its
// Passed without the mark; a key held by two ways (two CPUs inserted it at
// once) only for the first, as the program finds it. fn must not keep the
// pointers.
func visitSet(set *bpf.ShieldSourceSet, scratch *bpf.ShieldSource, fn func(*bpf.ShieldSrcKey, *bpf.ShieldSource)) int {
	n := 0
ways:
	for i := range set.Way {
		*scratch = set.Way[i] // one copy: the program may write the way meanwhile
		if !used(scratch) {
			continue
		}
		for j := range i {
			if used(&set.Way[j]) && set.Way[j].Key == scratch.Key {
				continue ways
			}
		}
		scratch.Passed &^= sourceUsed
		fn(&scratch.Key, scratch)
		n++
	}
	return n
}

// heldBy counts the sources of set.
func heldBy(set *bpf.ShieldSourceSet) int {
	n := 0
	for i := range set.Way {
		if used(&set.Way[i]) {
			n++
		}
	}
	return n
}

// place writes source v with key k into set as the program inserts (see
// insert() in bpf/shield.c), or over k's way when it holds k already, and
// marks the way used; replaced says another source was replaced. Times
// are compared to now (a reading of the program's clock). Unlike the
// program, which leaves a set of busy ways alone, place then replaces the
// least recently used way: a copy (migrate.go) places sources in the order
// they were last seen, so the most recent keep the set.
func place(set *bpf.ShieldSourceSet, k bpf.ShieldSrcKey, v bpf.ShieldSource, l config.Limits, now uint64) (replaced bool) {
	victim := findWay(set, &k)
	if victim == nil {
		best := ^uint64(0)
		fillP, fillU := config.BucketLimit(l.Rate, l.Burst).FillNs, config.BucketLimit(l.Unprotected.Rate, l.Unprotected.Burst).FillNs
		for i := range set.Way {
			e := &set.Way[i]
			if !used(e) {
				victim, replaced = e, false
				break
			}
			score := max(e.Bucket.LastNs, e.Unprotected.LastNs) >> 1
			if !(now >= e.Bucket.LastNs && now-e.Bucket.LastNs >= fillP) || !(now >= e.Unprotected.LastNs && now-e.Unprotected.LastNs >= fillU) {
				score |= 1 << 63
			}
			if score < best {
				best, victim, replaced = score, e, true
			}
		}
	}
	v.Key = k
	v.Passed |= sourceUsed
	*victim = v
	return replaced
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
	if m.Type() != ebpf.Array || m.ValueSize() != uint32(setSize) {
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
	b, err := unix.Mmap(m.FD(), 0, n*setSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the sources table: %w", err)
	}
	return &Table{
		sets:    unsafe.Slice((*bpf.ShieldSourceSet)(unsafe.Pointer(&b[0])), n),
		mapping: b,
		keys:    hashKeys(seed),
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
	set := &t.sets[setOf(hashOf(&k, &t.keys), t.bits)]
	if findWay(set, &k) == nil && heldBy(set) == len(set.Way) {
		return ErrSetFull
	}
	place(set, k, v, t.limits, 0)
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
	h := hashOf(&k, &s.hashKeys)
	replaced = place(&sets[setOf(h, s.setBits)], k, v, l, now)
	slot := slotOf(h)
	for f := range uint32(2) {
		atomic.OrUint64(&words[f*filterWords+slot/64], 1<<(slot%64))
	}
	return replaced
}
