package study

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/study/results"
)

// TestLBMissing: the xdplb section's check (what -quick fails on) names a
// target that handled nothing and a cell never measured, and accepts
// Maglev's moved share only near 1/n.
func TestLBMissing(t *testing.T) {
	r := &results.LBResults{Moved: movedShares()}
	for _, tg := range results.LBTargets {
		for _, fam := range results.ListFamilies {
			r.AddCell(tg, fam).Samples = []results.DropSample{{Seconds: 1, Sent: 10, SeenPPS: 10, DropPPS: 10}}
		}
	}
	r.Finish()
	require.Empty(t, r.Missing(), "every cell handled frames")
	for _, m := range r.Moved {
		assert.InDelta(t, 1/float64(m.N), m.Maglev, 0.05, "Maglev, n=%d", m.N)
		assert.Greater(t, m.Modulo, 0.5, "modulo, n=%d", m.N)
		// n ranges made n-1 move about half the flows whatever n (n=3:
		// 1/6+1/3; nft itself in xdplb's TestCompareBalancers: 158 of 300).
		assert.InDelta(t, 0.5, m.NFT, 0.001, "nft jhash, n=%d", m.N)
		assert.Greater(t, m.NFT, m.Maglev, "nft jhash moves more than Maglev, n=%d", m.N)
	}

	r.Cell("xdplb", "ipv6").Samples[0].DropPPS = 0
	r.Cells = r.Cells[1:] // drop/ipv4 never measured
	r.Moved = append(r.Moved, results.Moved{N: 4, Maglev: 0.75})
	r.Finish()
	got := strings.Join(r.Missing(), "\n")
	assert.Contains(t, got, "xdplb xdplb ipv6: nothing handled")
	assert.Contains(t, got, "xdplb drop ipv4: not measured")
	assert.Contains(t, got, "n=4: Maglev moved 0.750")

	floor := &results.LBCell{GenPPS: results.Stat{Median: 1e6}}
	assert.True(t, (&results.LBCell{DonePPS: results.Stat{Median: 0.95e6}}).GeneratorBound(floor))
	assert.False(t, (&results.LBCell{DonePPS: results.Stat{Median: 0.5e6}}).GeneratorBound(floor))
}

// TestRepairProgram: storm0's program writes the generator's Ethernet
// header back over what an IPIP / IP6IP6 encapsulation wrote there, and
// leaves an unencapsulated frame (the XDP_TX floor's) as it is; it drops
// every frame.
func TestRepairProgram(t *testing.T) {
	testutil.Root(t)
	edge, storm := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	p, err := repairProgram(edge, storm)
	require.NoError(t, err, "load repairProgram")
	defer p.Close()
	eth := func(dst, src net.HardwareAddr, typ uint16) []byte {
		b := append(append([]byte{}, dst...), src...)
		return binary.BigEndian.AppendUint16(b, typ)
	}
	want4 := eth(edge, storm, 0x0800)
	want6 := eth(edge, storm, 0x86dd)
	other := net.HardwareAddr{2, 0, 0, 0, 0, 9}
	for _, tc := range []struct {
		name  string
		frame []byte
		at    int    // where the template's header must be after the run
		want  []byte // what must be there
	}{
		{"ipip", append(eth(other, edge, 0x0800), ipHdr(4, 20, 9, 4)...), 20, want4},
		{"ip6ip6", append(eth(other, edge, 0x86dd), ipHdr(6, 40, 6, 41)...), 40, want6},
		{"udp4 (not encapsulated)", append(eth(edge, storm, 0x0800), ipHdr(4, 20, 9, 17)...), 0, want4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append(tc.frame, make([]byte, 64)...)
			before := bytes.Clone(in)
			out := make([]byte, len(in))
			ret, err := p.Run(&ebpf.RunOptions{Data: in, DataOut: out})
			require.NoError(t, err)
			assert.Equal(t, uint32(sim.Drop), ret, "XDP_DROP")
			assert.Equal(t, tc.want, out[tc.at:tc.at+14], "the Ethernet header at %d", tc.at)
			if tc.at > 0 {
				assert.Equal(t, before[:14], out[:14], "the outer Ethernet header left alone")
			} else {
				assert.Equal(t, before, out, "an unencapsulated frame left as it is")
			}
		})
	}
}

// ipHdr is n zero bytes of a version-v header with proto at offset off
// (IPv4's protocol: 9, IPv6's next header: 6).
func ipHdr(v byte, n, off int, proto byte) []byte {
	b := make([]byte, n)
	b[0] = v << 4
	b[off] = proto
	return b
}
