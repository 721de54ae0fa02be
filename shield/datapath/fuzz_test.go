package datapath

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// parsesAsIP is an independent model of what the shield must recognise as
// IP: Ethernet, at most two 802.1Q/802.1ad tags, then an IPv4 header
// (version 4, IHL >= 5, whole header present) or an IPv6 fixed header
// (version 6). It returns the reason the shield must give a frame it does
// not recognise (not_ip or malformed), or ok with the L4 protocol number
// (for IPv6 after the extension headers, v6Upper).
func parsesAsIP(b []byte) (counter.Reason, byte) {
	if len(b) < 14 {
		return counter.ReasonMalformed, 0
	}
	off, et := 14, binary.BigEndian.Uint16(b[12:])
	for range 2 {
		if et != 0x8100 && et != 0x88a8 {
			break
		}
		if len(b) < off+4 {
			return counter.ReasonMalformed, 0
		}
		et = binary.BigEndian.Uint16(b[off+2:])
		off += 4
	}
	switch et {
	case 0x0800:
		if len(b) < off+20 || b[off]>>4 != 4 || b[off]&0xf < 5 || len(b) < off+int(b[off]&0xf)*4 {
			return counter.ReasonMalformed, 0
		}
		return counter.ReasonOK, b[off+9]
	case 0x86dd:
		if len(b) < off+40 || b[off]>>4 != 6 {
			return counter.ReasonMalformed, 0
		}
		return counter.ReasonOK, v6Upper(b, off)
	}
	return counter.ReasonNotIP, 0
}

// other is a protocol number no class names: the class "other".
const other = 255

// v6Upper models the shield's walk of IPv6 extension headers (RFC 8200
// 4: hop-by-hop 0, routing 43, fragment 44, destination options 60; RFC
// 4302: AH 51) from the fixed header at off: the upper-layer protocol
// number, the fragment's next header for a non-first fragment, or other
// when more than maxExt headers come first or the chain runs past the
// frame's end (a header of the chain, not the upper layer's, cut short).
func v6Upper(b []byte, off int) byte {
	nh, cur := b[off+6], off+40
	for i := 0; ; i++ {
		switch nh {
		case 0, 43, 44, 51, 60:
		default:
			if cur > len(b) {
				return other
			}
			return nh
		}
		if i == maxExt || len(b) < cur+8 {
			return other
		}
		l := (int(b[cur+1]) + 1) * 8
		switch nh {
		case 44:
			if binary.BigEndian.Uint16(b[cur+2:])&0xfff8 != 0 {
				return b[cur]
			}
			l = 8
		case 51:
			l = (int(b[cur+1]) + 2) * 4
		}
		nh, cur = b[cur], cur+l
	}
}

func protoClass(p byte) counter.Proto {
	switch p {
	case 6:
		return counter.ProtoTCP
	case 17:
		return counter.ProtoUDP
	case 1, 58:
		return counter.ProtoICMP
	}
	return counter.ProtoOther
}

// fuzzShield is one shield per fuzzing process, with both lists in use and
// tight limits, so fuzzed frames reach every path.
var fuzzShield = sync.OnceValues(func() (*shield.Shield, error) {
	s, err := shield.Load(shield.Options{Compat: *compat, TableSize: 1024, Clock: config.ClockVirtual,
		Limits: config.Limits{Rate: 1, Burst: 2, AdmissionRate: 1, AdmissionBurst: 50}})
	if err != nil {
		return nil, err
	}
	for l, cidrs := range map[lists.List][]string{
		lists.AllowList: {"198.18.1.0/24", "2001:db8:1::/48"},
		lists.DenyList:  {"198.18.0.0/15", "2001:db8::/32", "10.9.0.0/16"},
	} {
		ps, err := lists.ParsePrefixes(cidrs)
		if err != nil {
			return nil, err
		}
		if _, err := s.Add(l, ps); err != nil {
			return nil, err
		}
	}
	return s, s.SetTime(1e9)
})

// FuzzShield: for any frame the kernel's test runner accepts, the verdict is
// XDP_PASS or XDP_DROP and never an error; exactly one counter moves, by
// one; a frame that does not parse as IP (by parsesAsIP, an independent
// model) passes with reason not_ip or malformed as the model says; a frame
// that parses is counted under its protocol with an IP reason.
func FuzzShield(f *testing.F) {
	for _, fr := range wellFormed() {
		f.Add(fr.Bytes())
	}
	for _, src := range []string{"198.18.1.1", "198.19.0.1", "2001:db8:1::1", "2001:db8:5::1", "203.0.113.1", "2001:db8:ffff::1"} {
		f.Add(sim.From(src, sim.TCP, sim.Double...).Bytes())
	}
	for i, b := range badCorpus() {
		if i%5 == 0 {
			f.Add(b.frame)
		}
	}
	// IPv6 extension chains: within the walk's bound, past it, cut short.
	for _, c := range [][]sim.Ext{{destOpts8}, {atomic}, {laterFrag}, rfc8200Order, append(append([]sim.Ext{}, rfc8200Order...), destOpts8)} {
		b := sim.Frame{Src: netipAddr("2001:db8:5::1"), Dst: netipAddr("2001:db8:ffff::fffe"), L4: sim.TCP, Ext: c}.Bytes()
		f.Add(b)
		f.Add(b[:62])
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < sim.MinFrame || len(frame) > sim.MaxFrame {
			t.Skip("BPF_PROG_TEST_RUN refuses this size before the program runs")
		}
		testutil.Root(t)
		s, err := fuzzShield()
		require.NoError(t, err, "load the shield")
		before, err := s.Counters()
		require.NoError(t, err)
		got, err := sim.Run(s.Program(), frame)
		require.NoError(t, err, "Run(%x)", frame)
		after, err := s.Counters()
		require.NoError(t, err)
		d := after.Sub(before)
		require.Equal(t, uint64(1), d.Total(), "counters moved by %d for one frame", d.Total())
		var v counter.Verdict
		var r counter.Reason
		var p counter.Proto
		d.Each(func(vv counter.Verdict, rr counter.Reason, pp counter.Proto, _ uint64) { v, r, p = vv, rr, pp })
		wantV := counter.Pass
		if got == sim.Drop {
			wantV = counter.Drop
		}
		require.Contains(t, []sim.Action{sim.Pass, sim.Drop}, got, "Run(%x)", frame)
		require.Equal(t, wantV, v, "counted verdict vs returned %s", got)

		reason, l4 := parsesAsIP(frame)
		if reason != counter.ReasonOK {
			require.Equal(t, sim.Pass, got, "Run(%x): a frame that does not parse as IP must pass", frame)
			require.Equal(t, Key(counter.Pass, reason, counter.ProtoOther), Key(v, r, p), "counter for %x", frame)
			return
		}
		require.NotContains(t, []counter.Reason{counter.ReasonNotIP, counter.ReasonMalformed}, r, "Run(%x): an IP frame counted as %s", frame, r)
		require.Equal(t, protoClass(l4), p, "Run(%x): protocol", frame)
	})
}
