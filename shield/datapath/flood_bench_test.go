package datapath

import (
	"context"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/sim"
)

// floodSrc is the forged flood's frame: IPv6, so a random 32 bits in the
// address's second word (frame bytes 26-29: Ethernet 14, IPv6 source at 8,
// address bytes 4-7) make a new /64 source key under 2001:db8::/32 per
// packet.
const (
	floodSrc    = "2001:db8::1"
	floodRandAt = 14 + 8 + 4
)

// forgerProgram is an XDP program that writes a random word into the
// source address of the frame in place and tail-calls slot 0 of progs: test
// runs of it see a new source on every packet (a test run's repetitions
// share one frame), as a forged flood does.
func forgerProgram(tb testing.TB, progs *ebpf.Map, at ebpf.AttachType) *ebpf.Program {
	tb.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:       "xdp_forger",
		Type:       ebpf.XDP,
		AttachType: at,
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R7, asm.R2),
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, floodRandAt+4),
			asm.JGT.Reg(asm.R4, asm.R3, "out"),
			asm.FnGetPrandomU32.Call(),
			asm.StoreMem(asm.R7, floodRandAt, asm.R0, asm.Word),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, progs.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnTailCall.Call(),
			asm.Mov.Imm(asm.R0, int32(sim.Pass)).WithSymbol("out"),
			asm.Return(),
		},
	})
	require.NoError(tb, err, "load the forger program")
	tb.Cleanup(func() { prog.Close() })
	return prog
}

// forge returns the forger with target in its tail-call slot; at is
// target's expected attach type, which a tail call's caller must share.
func forge(tb testing.TB, target *ebpf.Program, at ebpf.AttachType) *ebpf.Program {
	tb.Helper()
	progs, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	require.NoError(tb, err, "create the program array")
	tb.Cleanup(func() { progs.Close() })
	f := forgerProgram(tb, progs, at)
	require.NoError(tb, progs.Put(uint32(0), target), "put the target in the program array")
	return f
}

// BenchmarkForgedFlood: a forged flood, every packet from a new random
// source (a /64 under 2001:db8::/32, 2^32 of them), against the default
// table (1,048,576 entries) with the admission bucket empty: the
// admission-drop path as a flood takes it, where the lookup misses the
// caches, unlike BenchmarkShield's admission-drop with one source.
// "full" has the table filled with 1,000,000 other sources first (a long
// run's state: a miss walks a chain; the presence filter, refreshed, then
// has their bits set and sends that share of strangers to the table),
// "empty" has none.
//
// The forger (a random write and a tail call) runs in front of the shield;
// the same forger in front of XDP_DROP is timed in the same run, so
// x-ref = (forger+shield - forger+drop + reference) / reference is the
// shield's own cost per forged packet as a ratio to the XDP_DROP reference,
// comparable with BenchmarkShield's x-ref. Target: <= 4.
func BenchmarkForgedFlood(b *testing.B) {
	testutil.Root(b)
	for _, fill := range []struct {
		name string
		n    int
	}{{"full", 1_000_000}, {"empty", 0}} {
		b.Run(fill.name, func(b *testing.B) {
			s, err := shield.Load(shield.Options{Compat: *compat, TableSize: shield.DefaultTableSize, Clock: config.ClockVirtual})
			require.NoError(b, err)
			defer s.Close()
			setLimits(b, s, config.Limits{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1})
			require.NoError(b, s.SetTime(1))
			drainAdmission(b, s)
			fillPct := 0.0
			if fill.n > 0 {
				tab, err := s.Table()
				require.NoError(b, err)
				require.NoError(b, testutil.FillSources(tab.Put, shield.ErrSetFull, fill.n))
				// Written from user space: the presence filter learns
				// of them as the service's refresh would make it.
				st, err := s.RefreshFilter(context.Background())
				require.NoError(b, err)
				fillPct = 100 * st.Fill
			}
			ref := dropProgram(b)
			fref := forge(b, ref, ebpf.AttachNone)
			fshield := forge(b, s.Program(), ebpf.AttachXDP)
			frame := sim.From(floodSrc, sim.UDP).Bytes()
			before, err := s.Counters()
			require.NoError(b, err)
			b.ResetTimer()
			refNs := measure(b, ref, frame, b.N, nil)
			wNs := measure(b, fref, frame, b.N, nil)
			ns := measure(b, fshield, frame, b.N, nil)
			b.StopTimer()
			after, err := s.Counters()
			require.NoError(b, err)
			d := after.Sub(before)
			var on uint64
			for _, x := range d[counter.Drop][counter.ReasonAdmission] {
				on += x
			}
			share := 100 * float64(on) / float64(d.Total())
			assert.False(b, !(share >= 99) || d.Total() < uint64(b.N), "only %.2f%% of %d packets (of %d sent) took the admission-drop path: %v", share, d.Total(), b.N, CounterMap(d))
			b.ReportMetric(ns-wNs+refNs, "ns/pkt")
			b.ReportMetric(wNs-refNs, "forger-ns")
			b.ReportMetric((ns-wNs+refNs)/refNs, "x-ref")
			b.ReportMetric(share, "on-path-%")
			b.ReportMetric(fillPct, "filter-fill-%")
		})
	}
}
