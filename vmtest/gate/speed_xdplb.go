package gate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/xdplb"
)

// The balancer's paths (bpf/xdplb.c), on the configuration of xdplbConfig:
// a VIP's established flow (a connection table hit) encapsulated in IPIP
// and in IP6IP6, a VIP's new flow (a miss: the Maglev ring's slot, and
// the table learns it, evicting at steady state), and a packet to no VIP
// (passed).
//
// BPF_PROG_TEST_RUN runs every repeat on the same frame, as the last run
// left it (measured: of 1,000 repeats of a VIP's frame, 1 was balanced
// and 999 saw the IPIP packet the first made and passed as not_vip). So
// the paths that encapsulate time restorer, which undoes the last run's
// encapsulation and tail-calls the balancer: on both sides, the same
// restorer, so new/base compares the balancers; the ratio to XDP_DROP
// includes it.
var xdplbPaths = []speedPath{
	{name: "xdplb/conn-hit-ipip", object: "xdplb", ownRun: true, load: xdplbPath{
		frame: sim.Frame{Src: netip.MustParseAddr(benchSrc), Dst: xdplbVIP4, L4: sim.TCP, SrcPort: 40000, DstPort: 80},
		encap: true, hit: true}.load},
	{name: "xdplb/conn-hit-ip6ip6", object: "xdplb", ownRun: true, load: xdplbPath{
		frame: sim.Frame{Src: netip.MustParseAddr("2001:db8::1"), Dst: xdplbVIP6, L4: sim.UDP, SrcPort: 40000, DstPort: 53},
		encap: true, hit: true}.load},
	{name: "xdplb/new-flow", object: "xdplb", ownRun: true, load: xdplbPath{
		frame: sim.Frame{Src: netip.MustParseAddr(benchSrc), Dst: xdplbVIP4, L4: sim.TCP, SrcPort: 40000, DstPort: 80},
		encap: true, fresh: true}.load},
	{name: "xdplb/not-vip", object: "xdplb", ownRun: true, load: xdplbPath{
		frame: sim.From(benchSrc, sim.UDP)}.load},
}

var (
	xdplbVIP4 = netip.MustParseAddr("198.18.100.1")
	xdplbVIP6 = netip.MustParseAddr("2001:db8:100::1")
)

// xdplbConfig has a VIP of each family, with three and two backends.
func xdplbConfig() xdplb.Config {
	be := func(addrs ...string) []xdplb.Backend {
		var out []xdplb.Backend
		for _, a := range addrs {
			out = append(out, xdplb.Backend{Addr: netip.MustParseAddr(a)})
		}
		return out
	}
	return xdplb.Config{
		NextHop: xdplb.MAC(net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}),
		Source4: netip.MustParseAddr("198.18.0.254"), Source6: netip.MustParseAddr("2001:db8::fe"), MTU: 1500,
		VIPs: []xdplb.VIP{
			{Addr: xdplbVIP4, Port: 80, Proto: "tcp", Backends: be("198.18.1.1", "198.18.1.2", "198.18.1.3")},
			{Addr: xdplbVIP6, Port: 53, Proto: "udp", Backends: be("2001:db8:1::1", "2001:db8:1::2")},
		},
	}
}

// xdplbPath is one path of the balancer.
type xdplbPath struct {
	frame sim.Frame
	encap bool // balanced: timed through restorer
	hit   bool // the flow is established first: every packet hits the table
	fresh bool // every packet from another source address: a new flow
}

func (p xdplbPath) load(spec *ebpf.CollectionSpec) (*subject, error) {
	b, err := xdplb.LoadSpec(spec)
	if err != nil {
		return nil, err
	}
	sub := &subject{prog: b.Program(), close: func() { b.Close() }}
	ok := false
	defer func() {
		if !ok {
			sub.close()
		}
	}()
	if err := b.Apply(xdplbConfig()); err != nil {
		return nil, err
	}
	if sub.frame, err = p.frame.Build(); err != nil {
		return nil, err
	}
	want := sim.Pass
	if p.encap {
		want = sim.TX
	}
	// Once through the balancer itself: the path's action (and, for a
	// hit, the flow learnt).
	if got, err := sim.Run(b.Program(), sub.frame); err != nil || got != want {
		return nil, fmt.Errorf("Run() = %s, %v, want %s", got, err, want)
	}
	if p.encap {
		// A program array holds programs of its first one's kind,
		// expected attach type included (6.x).
		r, err := newRestorer(b.Program(), xdplbAttach(spec), sub.frame, p.fresh)
		if err != nil {
			return nil, err
		}
		sub.prog = r.prog
		sub.close = func() { r.close(); b.Close() }
		if p.fresh {
			// Fill the connection table: every timed packet then evicts,
			// as new flows do at steady state. Its LRU lists are per CPU
			// (BPF_F_NO_COMMON_LRU), each CPU's share of the entries its
			// own: filled on one CPU only, a timed run on another
			// inserted without evicting, and a side's figure depended on
			// where its runs landed (measured: 5 of 20 runs of the
			// program against itself over the limit, up to +40%).
			err := onEveryCPU(func() error {
				_, _, err := r.prog.Benchmark(sub.frame, 65536, nil)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("fill the connection table: %w", err)
			}
		}
	}
	on := func(s xdplb.Stats) uint64 { return s.Reasons["not_vip"] }
	sub.what = "not_vip"
	switch {
	case p.hit:
		on, sub.what = func(s xdplb.Stats) uint64 { return s.Reasons["conn_hit"] }, "conn_hit"
	case p.encap:
		on, sub.what = func(s xdplb.Stats) uint64 { return s.Reasons["tx"] - s.Reasons["conn_hit"] }, "tx without conn_hit"
	}
	sub.tally = func() (uint64, uint64, error) {
		s, err := b.Stats()
		if err != nil {
			return 0, 0, err
		}
		var all uint64
		for name, n := range s.Reasons {
			if name != "conn_hit" { // a part of tx and icmp_tx
				all += n
			}
		}
		return on(s), all, nil
	}
	ok = true
	return sub, nil
}

func xdplbAttach(spec *ebpf.CollectionSpec) ebpf.AttachType {
	if spec == nil {
		if spec, _ = bpf.LoadXdplb(); spec == nil {
			return ebpf.AttachXDP
		}
	}
	if p := spec.Programs[bpf.XdplbProgXdplb]; p != nil {
		return p.AttachType
	}
	return ebpf.AttachXDP
}

// restorer is a program that undoes the balancer's encapsulation of
// frame, if the last run left it encapsulated, and tail-calls the
// balancer: bpf_xdp_adjust_head by the outer header's size and frame's
// Ethernet header written back (the inner packet is where it was). With
// fresh, the source address's last 32 bits become a counter kept in a
// map before the call, so every packet, in this test run and the next
// (each starts from frame again), is a new flow.
type restorer struct {
	prog      *ebpf.Program
	next, seq *ebpf.Map
}

func (r restorer) close() {
	r.prog.Close()
	r.next.Close()
	r.seq.Close()
}

func newRestorer(target *ebpf.Program, attach ebpf.AttachType, frame []byte, fresh bool) (*restorer, error) {
	if len(frame) < 14+40+4 {
		return nil, errors.New("restorer: frame too short")
	}
	// Where the outer header says what it carries, and what it says.
	protoAt, encap, outer, src := int16(14+9), int32(4), int32(20), int16(14+12) // IPv4: protocol IPIP
	if binary.BigEndian.Uint16(frame[12:]) == 0x86dd {
		protoAt, encap, outer, src = 14+6, 41, 40, 14+8+12 // IPv6: next header IPv6
	}
	next, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("restorer: program array: %w", err)
	}
	if err := next.Put(uint32(0), target); err != nil {
		next.Close()
		return nil, fmt.Errorf("restorer: program array: %w", err)
	}
	seq, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		next.Close()
		return nil, fmt.Errorf("restorer: counter: %w", err)
	}
	word := func(b []byte) int64 { return int64(int32(binary.LittleEndian.Uint32(b))) }
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, int32(protoAt)+1),
		asm.JGT.Reg(asm.R4, asm.R3, "call"),
		asm.LoadMem(asm.R5, asm.R2, protoAt, asm.Byte),
		asm.JNE.Imm(asm.R5, encap, "call"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, outer),
		asm.FnXdpAdjustHead.Call(),
		asm.JNE.Imm(asm.R0, 0, "abort"),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14),
		asm.JGT.Reg(asm.R4, asm.R3, "abort"),
		asm.StoreImm(asm.R2, 0, word(frame[0:]), asm.Word),
		asm.StoreImm(asm.R2, 4, word(frame[4:]), asm.Word),
		asm.StoreImm(asm.R2, 8, word(frame[8:]), asm.Word),
		asm.StoreImm(asm.R2, 12, int64(binary.LittleEndian.Uint16(frame[12:])), asm.Half),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("call"),
	}
	if fresh {
		insns = append(insns,
			asm.StoreImm(asm.R10, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, seq.FD()),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "abort"),
			asm.LoadMem(asm.R5, asm.R0, 0, asm.Word),
			asm.Add.Imm(asm.R5, 1),
			asm.StoreMem(asm.R0, 0, asm.R5, asm.Word),
			asm.LoadMem(asm.R2, asm.R6, 0, asm.Word),
			asm.LoadMem(asm.R3, asm.R6, 4, asm.Word),
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, int32(src)+4),
			asm.JGT.Reg(asm.R4, asm.R3, "abort"),
			asm.StoreMem(asm.R2, src, asm.R5, asm.Word),
		)
	}
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, next.FD()),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, int32(sim.Pass)), // the tail call failed
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("abort"), // XDP_ABORTED
		asm.Return(),
	)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "gate_restorer", Type: ebpf.XDP, AttachType: attach, License: "GPL", Instructions: insns})
	if err != nil {
		next.Close()
		seq.Close()
		return nil, fmt.Errorf("restorer: %w", err)
	}
	return &restorer{prog: prog, next: next, seq: seq}, nil
}

// onEveryCPU calls fn on each CPU this process may run on, its thread
// pinned there, and restores the thread's affinity.
func onEveryCPU(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return fmt.Errorf("affinity: %w", err)
	}
	defer unix.SchedSetaffinity(0, &all)
	for cpu := range 8 * int(unsafe.Sizeof(all)) {
		if !all.IsSet(cpu) {
			continue
		}
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return fmt.Errorf("affinity: cpu %d: %w", cpu, err)
		}
		if err := fn(); err != nil {
			return err
		}
	}
	return nil
}
