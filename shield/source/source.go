package source

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"unsafe"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
)

// Source is one tracked source as the table holds it: an IPv4 address or
// an IPv6 prefix (Limits.KeyPrefix4 and KeyPrefix6).
type Source struct {
	Addr    netip.Addr   `json:"addr"`   // the first address of Prefix
	Prefix  netip.Prefix `json:"prefix"` // every address sharing the bucket
	Passed  uint64       `json:"passed"`
	Dropped uint64       `json:"dropped"`
	// Limited says the source's next packet would be dropped: its bucket,
	// refilled to the program's clock as the program would refill it,
	// holds less than one packet's credit.
	Limited bool `json:"limited"`
}

// Prefix is the prefix a's bucket covers under limits l.
func Prefix(a netip.Addr, l config.Limits) netip.Prefix {
	a = a.Unmap()
	bits := int(l.KeyPrefix6)
	if a.Is4() {
		bits = int(l.KeyPrefix4)
	}
	p, _ := a.Prefix(bits)
	return p
}

// Key is the table key of a's source under limits l.
func Key(a netip.Addr, l config.Limits) bpf.ShieldSrcKey {
	return bpf.ShieldSrcKey{Addr: netip.AddrFrom16(Prefix(a, l).Addr().As16()).As16()}
}

// Of is the Source of way v with key k; limited judges its bucket.
func Of(k bpf.ShieldSrcKey, v bpf.ShieldSource, limited func(*bpf.ShieldBucket) bool, l config.Limits) Source {
	a := netip.AddrFrom16(k.Addr).Unmap()
	return Source{
		Addr:    a,
		Prefix:  Prefix(a, l),
		Passed:  v.Passed,
		Dropped: v.Dropped,
		Limited: limited(&v.Bucket),
	}
}

// The sources table (sources in bpf/shield.c): an array of sets of ways
// ways, each way one source of 64 bytes. A source lives in the set its
// keyed hash names; user space reads the table through a memory mapping.
const (
	ways = uint32(len(bpf.ShieldSourceSet{}.Way)) // WAYS
	// sourceUsed marks a way holding a source, in its Passed (SOURCE_USED).
	Used = uint64(1) << 63
	// setSize is the bytes of one set (an element of the array).
	SetSize = int(unsafe.Sizeof(bpf.ShieldSourceSet{}))
)

// Ways is how many sources a set of the table holds.
const Ways = int(ways)

// SetBits is log2 of the sets of a table of n sources (set_bits).
func SetBits(n uint32) uint32 { return uint32(bits.TrailingZeros32(n / ways)) }

// HashKeys derives hash_of's five keys from the configuration's random
// filter seed (splitmix64), so the seed kept in the pinned configuration
// names the hash of the table pinned beside it.
func HashKeys(seed uint64) [5]uint64 {
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

// HashOf mirrors hash_of in bpf/shield.c: the key's four 32-bit words as
// the (little-endian) program reads them, then the mix.
func HashOf(k *bpf.ShieldSrcKey, keys *[5]uint64) uint64 {
	h := keys[4]
	for i := range 4 {
		h += keys[i] * uint64(binary.LittleEndian.Uint32(k.Addr[4*i:]))
	}
	h ^= h >> 31
	return h * hashMix
}

// hashMix is HASH_MIX: an odd constant (splitmix64's first).
const hashMix = 0xbf58476d1ce4e5b9

// SetOf mirrors set_of: a hash's set in a table of 2^bits sets.
func SetOf(h uint64, bits uint32) uint32 { return uint32((h >> 32) >> (32 - bits)) }

// InUse says whether way e holds a source.
func InUse(e *bpf.ShieldSource) bool { return e.Passed&Used != 0 }

// FindWay returns the way of set holding k, or nil, as find() does.
func FindWay(set *bpf.ShieldSourceSet, k *bpf.ShieldSrcKey) *bpf.ShieldSource {
	for i := range set.Way {
		if e := &set.Way[i]; InUse(e) && e.Key == *k {
			return e
		}
	}
	return nil
}

// VisitSet calls fn for every source of set with a copy of its way in
// *scratch (one per walk: a copy per source would escape to the heap), its
// Passed without the mark; a key held by two ways (two CPUs inserted it at
// once) only for the first, as the program finds it. fn must not keep the
// pointers.
func VisitSet(set *bpf.ShieldSourceSet, scratch *bpf.ShieldSource, fn func(*bpf.ShieldSrcKey, *bpf.ShieldSource)) int {
	n := 0
ways:
	for i := range set.Way {
		*scratch = set.Way[i] // one copy: the program may write the way meanwhile
		if !InUse(scratch) {
			continue
		}
		for j := range i {
			if InUse(&set.Way[j]) && set.Way[j].Key == scratch.Key {
				continue ways
			}
		}
		scratch.Passed &^= Used
		fn(&scratch.Key, scratch)
		n++
	}
	return n
}

// HeldBy counts the sources of set.
func HeldBy(set *bpf.ShieldSourceSet) int {
	n := 0
	for i := range set.Way {
		if InUse(&set.Way[i]) {
			n++
		}
	}
	return n
}

// Place writes source v with key k into set as the program inserts (see
// insert() in bpf/shield.c), or over k's way when it holds k already, and
// marks the way used; replaced says another source was replaced. Times
// are compared to now (a reading of the program's clock). Unlike the
// program, which leaves a set of busy ways alone, place then replaces the
// least recently used way: a copy (migrate.go) places sources in the order
// they were last seen, so the most recent keep the set.
func Place(set *bpf.ShieldSourceSet, k bpf.ShieldSrcKey, v bpf.ShieldSource, l config.Limits, now uint64) (replaced bool) {
	victim := FindWay(set, &k)
	if victim == nil {
		best := ^uint64(0)
		fillP, fillU := config.BucketLimit(l.Rate, l.Burst).FillNs, config.BucketLimit(l.Unprotected.Rate, l.Unprotected.Burst).FillNs
		for i := range set.Way {
			e := &set.Way[i]
			if !InUse(e) {
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
	v.Passed |= Used
	*victim = v
	return replaced
}

// TopOrder says what top talkers are ranked by.
type TopOrder uint8

const (
	ByDropped TopOrder = iota // packets dropped (or that would be, in dry-run)
	ByPassed                  // packets passed
)

func (o TopOrder) String() string {
	if o == ByPassed {
		return "passed"
	}
	return "dropped"
}

// ParseTopOrder returns the order named s ("dropped" or "passed").
func ParseTopOrder(s string) (TopOrder, error) {
	switch s {
	case "dropped":
		return ByDropped, nil
	case "passed":
		return ByPassed, nil
	}
	return 0, fmt.Errorf("unknown order %q (want dropped or passed)", s)
}

// MaxTop bounds the n of Top: the heap Top keeps is at most this long.
const MaxTop = 1000

// LimitedAt says whether bucket b, refilled up to now as the program would
// refill it on the next packet, holds less than one packet's credit: the
// source's next packet would be dropped.
func LimitedAt(b *bpf.ShieldBucket, l bpf.ShieldLimit, now uint64) bool {
	credit := b.Credit
	if now > b.LastNs {
		elapsed := now - b.LastNs
		add := int64(l.Cap)
		if elapsed < l.FillNs {
			add = int64(elapsed * l.Rate)
		}
		credit = min(credit+add, int64(l.Cap))
	}
	return credit < config.Token
}
