package shield

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/source"
)

// TestHashCannotBeAimed: whoever knows a source's key but not the seed
// cannot pick keys that land in its set. For the keys a forger would try
// first, the source's key with one bit flipped (in the /64 an IPv6 key
// keeps, or an IPv4 address), the offset of their set from the source's
// is spread over the table's sets across seeds, never a fixed offset or
// two: at most 5 of 256 seeds agree on any offset (uniform: about 1 in
// 2^18). A hash that XORed the seed in before multiplying (the presence
// filter's first one) moves a flipped bit's set by one of two fixed
// offsets, and fails (red once so).
func TestHashCannotBeAimed(t *testing.T) {
	const seeds = 256
	bits := source.SetBits(DefaultTableSize)
	sets := uint32(1) << bits
	for _, v := range []netip.Addr{netip.MustParseAddr("2001:db8:1:2::"), netip.MustParseAddr("::ffff:198.18.0.1")} {
		k := source.Key(v, config.DefaultLimits())
		first, last := 0, 64 // the /64
		if v.Is4In6() {
			first, last = 96, 128
		}
		for bit := first; bit < last; bit++ {
			f := k
			f.Addr[bit/8] ^= 0x80 >> (bit % 8)
			offsets := map[uint32]int{}
			worst := 0
			for seed := range uint64(seeds) {
				keys := source.HashKeys(seed*0x9e3779b97f4a7c15 + 1)
				d := (source.SetOf(source.HashOf(&f, &keys), bits) - source.SetOf(source.HashOf(&k, &keys), bits)) & (sets - 1)
				offsets[d]++
				worst = max(worst, offsets[d])
			}
			assert.LessOrEqual(t, worst, 5, "%s with bit %d flipped: %d of %d seeds put it at the same offset from the source's set, want at most 5", v, bit, worst, seeds)
		}
	}
}

// TestHashKeysAllFollowTheSeed: every one of hash_of's five keys changes
// with the seed. One offset per flipped bit (TestHashCannotBeAimed) does
// not see a hash whose multipliers are fixed and only the added key is
// random: its mix spreads the offsets, yet two keys whose multiplied sums
// are equal (found from the public multipliers) share a set and a filter
// slot under every seed (red once so: fixed multipliers pass
// TestHashCannotBeAimed).
func TestHashKeysAllFollowTheSeed(t *testing.T) {
	const seeds = 256
	for i := range 5 {
		seen := map[uint64]uint64{}
		for seed := range uint64(seeds) {
			s := seed*0x9e3779b97f4a7c15 + 1
			k := source.HashKeys(s)[i]
			prev, ok := seen[k]
			if !assert.False(t, ok, "hashKeys(%#x)[%d] = source.HashKeys(%#x)[%d] = %#x: that key does not follow the seed", s, i, prev, i, k) {
				break
			}
			seen[k] = s
		}
	}
}

// TestHashMirror: hashOf reads the key's words as the little-endian
// program does and mixes the sum as it does, and the set and slot are the
// hash's top bits (the program agreeing is what every test that finds a
// source with Source, or refreshes the presence filter, checks).
func TestHashMirror(t *testing.T) {
	var k [16]byte
	for i := range k {
		k[i] = byte(i + 1)
	}
	key := bpf.ShieldSrcKey{Addr: k}
	keys := [5]uint64{3, 5, 7, 11, 13}
	want := uint64(13)
	for i := range 4 {
		want += keys[i] * uint64(binary.LittleEndian.Uint32(k[4*i:]))
	}
	want ^= want >> 31
	want *= 0xbf58476d1ce4e5b9
	got := source.HashOf(&key, &keys)
	require.EqualValues(t, want, got, "hashOf = %#x, want %#x", got, want)
	h := uint64(0xfedcba9876543210)
	set := source.SetOf(h, 18)
	assert.EqualValues(t, 0xfedcba98>>14, set, "setOf(%#x, 18) = %#x, want %#x", h, set, 0xfedcba98>>14)
	set = source.SetOf(h, 0)
	assert.EqualValues(t, 0, set, "setOf(%#x, 0) = %d, want 0 (one set)", h, set)
	slot := slotOf(h)
	assert.EqualValues(t, 0xfedcba, slot, "slotOf(%#x) = %#x, want 0xfedcba", h, slot)
}

// TestHashSpreadsProgressions: the addresses of one network are keys in
// arithmetic progression, and a sum of multiples (the hash before its mix)
// puts them in sets in arithmetic progression too: for a seed in a few,
// one whose step is near a multiple of the sets piles many into one set.
// For each of 64 seeds, the 65,536 addresses of a /16 (and the 256 of a
// /24 in a table of 256 sets) must overflow (more than ways in a set) no
// more sets than random keys would: about 1.7 (and 0.9) expected, at most
// 12 (and 7) allowed. Red without the mix (2,844 and 34 for some seeds).
func TestHashSpreadsProgressions(t *testing.T) {
	testutil.HostOnly(t, "the hash's spread is pure Go")
	for _, tc := range []struct {
		net     string
		size    uint32
		allowed int
	}{{"198.18.0.0/16", DefaultTableSize, 12}, {"198.18.0.0/24", 1024, 7}} {
		p := netip.MustParsePrefix(tc.net)
		bits := source.SetBits(tc.size)
		worst := 0
		for seed := range uint64(64) {
			keys := source.HashKeys(seed*0x9e3779b97f4a7c15 + 7)
			load := map[uint32]int{}
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				k := source.Key(a, config.DefaultLimits())
				load[source.SetOf(source.HashOf(&k, &keys), bits)]++
			}
			over := 0
			for _, n := range load {
				if n > int(uint32(source.Ways)) {
					over++
				}
			}
			worst = max(worst, over)
		}
		t.Logf("%s in a table of %d: at most %d sets overflowed, over 64 seeds", tc.net, tc.size, worst)
		assert.LessOrEqual(t, worst, tc.allowed, "%s in a table of %d: %d sets overflowed for one seed, want at most %d", tc.net, tc.size, worst, tc.allowed)
	}
}
