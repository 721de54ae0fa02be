package e2e

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// touchProgram reads the IPv4 source of a frame and drops it: the
// reference plus what any program that judges a frame pays, the packet's
// first cache line.
func touchProgram(tb testing.TB) *ebpf.Program {
	tb.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xdp_touch_ref", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 30),
			asm.JGT.Reg(asm.R4, asm.R3, "out"),
			asm.LoadMem(asm.R0, asm.R2, 26, asm.Word),
			asm.StoreMem(asm.RFP, -8, asm.R0, asm.Word),
			asm.Mov.Imm(asm.R0, int32(sim.Drop)).WithSymbol("out"),
			asm.Return(),
		},
	})
	require.NoError(tb, err, "load the touch reference")
	tb.Cleanup(func() { prog.Close() })
	return prog
}

// liveBase names a shield object (bpf/shield_bpfel.o of another revision
// with this loader's layout) whose limit-drop and ok paths
// BenchmarkLiveCost measures beside this tree's, in the same rounds.
var liveBase = flag.String("live-base", "", "BenchmarkLiveCost: a shield object to measure beside this tree's")

// liveSubject is one program measured on the live path.
type liveSubject struct {
	name string
	prog *ebpf.Program
}

// BenchmarkLiveCost measures what each program costs per frame on the live
// XDP path (a veth receiving frames from the live-frames generator in
// another namespace) and under BPF_PROG_TEST_RUN with the same frame, both
// with the kernel's run-time statistics (BPF_ENABLE_STATS, released when
// the benchmark ends): XDP_DROP, a program that only reads the source
// address, and the shield on its deny, limit-drop and ok paths from 16
// sources. Each of b.N rounds sends every subject 1,000,000 frames, in
// turn, so the machine's drift moves all alike. Run with
// `go test -run '^$' -bench LiveCost -benchtime 5x ./e2e` as root.
func BenchmarkLiveCost(b *testing.B) {
	testutil.Root(b)
	testutil.Feature(b, features.LiveFrames)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	require.NoError(b, err, "enable run-time statistics")
	defer stats.Close()

	gen, err := topo.New("lcgen")
	require.NoError(b, err)
	defer gen.Close()
	edge, err := topo.New("lcedge")
	require.NoError(b, err)
	defer edge.Close()
	require.NoError(b, topo.Veth(gen, "lcg0", edge, "lce0"))
	gIdx, err := gen.LinkIndex("lcg0")
	require.NoError(b, err)
	eIdx, err := edge.LinkIndex("lce0")
	require.NoError(b, err)
	gMAC, err := gen.HardwareAddr("lcg0")
	require.NoError(b, err)
	eMAC, err := edge.HardwareAddr("lce0")
	require.NoError(b, err)
	g, err := storm.NewXDPGenerator(gen, gIdx)
	require.NoError(b, err)
	defer g.Close()
	tpl, err := storm.BuildTemplate(storm.Flow{Proto: storm.UDP, First: netip.MustParseAddr("198.18.0.1"), Count: 16}, gMAC, eMAC, netip.MustParseAddr("198.19.0.1"))
	require.NoError(b, err)

	drop, err := sim.DropProgram()
	require.NoError(b, err)
	defer drop.Close()
	subjects := []liveSubject{{"xdp-drop", drop}, {"touch-src", touchProgram(b)}}
	type variant struct {
		name, path string
		spec       *ebpf.CollectionSpec
	}
	variants := []variant{{"shield-deny", "deny", nil}, {"shield-limit-drop", "limit-drop", nil}, {"shield-ok", "ok", nil}}
	if *liveBase != "" {
		spec, err := ebpf.LoadCollectionSpec(*liveBase)
		require.NoError(b, err, "load -live-base")
		variants = append(variants, variant{"base-limit-drop", "limit-drop", spec}, variant{"base-ok", "ok", spec})
	}
	for _, v := range variants {
		path := v.path
		s, err := shield.Load(shield.Options{TableSize: 65536, Spec: v.spec})
		require.NoError(b, err)
		defer s.Close()
		switch path {
		case "deny":
			ps, _ := lists.ParsePrefixes([]string{"198.18.0.0/15"})
			_, err = s.Add(lists.DenyList, ps)
		case "limit-drop":
			err = s.SetLimits(config.Limits{Rate: 1, Burst: 1, AdmissionRate: 1000, AdmissionBurst: 1000})
		case "ok":
			err = s.SetLimits(config.Limits{Rate: 1e9, Burst: 1e9, AdmissionRate: 1000, AdmissionBurst: 1000})
		}
		require.NoError(b, err)
		subjects = append(subjects, liveSubject{v.name, s.Program()})
	}

	const frames = 1_000_000
	live := make([][]float64, len(subjects))
	testRun := make([][]float64, len(subjects))
	nsOf := func(p *ebpf.Program, run func() error) float64 {
		before, err := p.Stats()
		require.NoError(b, err)
		require.NoError(b, run())
		after, err := p.Stats()
		require.NoError(b, err)
		n := after.RunCount - before.RunCount
		require.NotZero(b, n, "no runs counted")
		return float64(after.Runtime-before.Runtime) / float64(n)
	}
	b.ResetTimer()
	for range b.N {
		for i, sub := range subjects {
			var l link.Link
			require.NoError(b, edge.Do(func() (err error) {
				l, err = link.AttachXDP(link.XDPOptions{Program: sub.prog, Interface: eIdx})
				return err
			}), "attach %s", sub.name)
			// Warm up: the shield's sources are established (limit-drop:
			// drained) before the timed frames.
			_, err := g.Send(&tpl, 16*4)
			require.NoError(b, err)
			live[i] = append(live[i], nsOf(sub.prog, func() error {
				_, err := g.Send(&tpl, frames)
				return err
			}))
			require.NoError(b, l.Close())
			frame := tpl.Frame
			testRun[i] = append(testRun[i], nsOf(sub.prog, func() error {
				_, _, err := sub.prog.Benchmark(frame, frames/10, nil)
				return err
			}))
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 { return slices.Sorted(slices.Values(xs))[len(xs)/2] }
	refLive, refRun := med(live[0]), med(testRun[0])
	// Printed, not logged: a benchmark's log is cut at ten lines.
	fmt.Fprintf(os.Stderr, "BenchmarkLiveCost: %d rounds of %d frames per subject (medians, ns/frame, run-time statistics)\n", len(live[0]), frames)
	idx := map[string]int{}
	for i, sub := range subjects {
		idx[sub.name] = i
		l, r := med(live[i]), med(testRun[i])
		fmt.Fprintf(os.Stderr, "  %-18s live %6.1f (+%5.1f over xdp-drop)  test_run %6.1f (+%5.1f)\n", sub.name, l, l-refLive, r, r-refRun)
		b.ReportMetric(l, sub.name+"-live-ns")
		b.ReportMetric(r, sub.name+"-testrun-ns")
	}
	// This tree against the base, round by round (the same round's
	// machine for both).
	for _, path := range []string{"limit-drop", "ok"} {
		i, ok := idx["base-"+path]
		if !ok {
			continue
		}
		j := idx["shield-"+path]
		var ratios []float64
		for k := range live[i] {
			ratios = append(ratios, live[j][k]/live[i][k])
		}
		fmt.Fprintf(os.Stderr, "  %-18s live this/base per round %v, median %.3f\n", path, fmt.Sprintf("%.2f", ratios), med(ratios))
	}
}
