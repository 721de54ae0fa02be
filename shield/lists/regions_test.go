package lists

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRegions: every region a prefix of the tries reaches is set, and no
// other: IPv4 regions are the first 16 bits, IPv6 regions bits 16 to 31.
func TestRegions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prefixes []string
		own      []string
		v4, v6   []uint32 // Regions that must be set
		n4, n6   int      // how many are set in all
	}{
		{name: "none"},
		{name: "a /24", prefixes: []string{"198.18.7.0/24"}, v4: []uint32{198<<8 | 18}, n4: 1},
		{name: "a /15 spans two", prefixes: []string{"198.18.0.0/15"}, v4: []uint32{198<<8 | 18, 198<<8 | 19}, n4: 2},
		{name: "a /8 spans 256", prefixes: []string{"10.0.0.0/8"}, v4: []uint32{10 << 8, 10<<8 | 255}, n4: 256},
		{name: "everything", prefixes: []string{"0.0.0.0/0", "::/0"}, n4: 65536, n6: 65536},
		{name: "an IPv6 /48", prefixes: []string{"2001:db8:1::/48"}, v6: []uint32{0x0db8}, n6: 1},
		{name: "an IPv6 /29 spans 8", prefixes: []string{"2001:db8::/29"}, v6: []uint32{0x0db8, 0x0dbf}, n6: 8},
		{name: "an IPv6 /12 spans all", prefixes: []string{"2000::/12"}, n6: 65536},
		{name: "own addresses", own: []string{"198.19.200.1", "2001:db8:ffff::1"}, v4: []uint32{198<<8 | 19}, v6: []uint32{0x0db8}, n4: 1, n6: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps []netip.Prefix
			for _, s := range tc.prefixes {
				ps = append(ps, netip.MustParsePrefix(s))
			}
			var own []netip.Addr
			for _, s := range tc.own {
				own = append(own, netip.MustParseAddr(s))
			}
			v4, v6 := Regions(ps, own)
			for _, c := range []struct {
				fam   string
				bits  *[RegionWords]uint64
				want  []uint32
				count int
			}{{"IPv4", &v4, tc.v4, tc.n4}, {"IPv6", &v6, tc.v6, tc.n6}} {
				n := 0
				for r := range uint32(65536) {
					if c.bits[r>>6]>>(r&63)&1 == 1 {
						n++
					}
				}
				assert.EqualValues(t, c.count, n, "regions(%v, %v): %d %s Regions set, want %d", tc.prefixes, tc.own, n, c.fam, c.count)
				for _, r := range c.want {
					assert.EqualValues(t, 1, c.bits[r>>6]>>(r&63)&1, "regions(%v, %v): %s region %#04x not set", tc.prefixes, tc.own, c.fam, r)
				}
			}
		})
	}
}
