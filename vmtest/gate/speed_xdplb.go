package gate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/xdplb"
)

// The balancer's paths (bpf/xdplb.c), on the configuration of xdplbConfig:
// a VIP's established flow (a connection table hit) encapsulated in IPIP
// and in IP6IP6, a VIP's new flow (a miss: the Maglev ring's slot, and
// the table learns it; the flows made are forgotten between timed runs,
// so the table never fills), and a packet to no VIP (passed).
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

// load loads this tree's balancer (spec is nil: the base's program runs
// on this one's maps, through beside) and sets it up on the path.
func (p xdplbPath) load(spec *ebpf.CollectionSpec) (*subject, error) {
	if spec != nil {
		return nil, errors.New("the base's balancer runs on this tree's maps (subject.beside)")
	}
	b, err := xdplb.Load()
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
	var seq *ebpf.Map
	if p.fresh {
		if seq, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}); err != nil {
			return nil, fmt.Errorf("source counter: %w", err)
		}
		closeB := sub.close
		sub.close = func() { closeB(); seq.Close() }
	}
	// wrap gives prog the path's restorer, when it has one, and says
	// how to close what it made.
	wrap := func(prog *ebpf.Program) (*ebpf.Program, func(), error) {
		if !p.encap {
			return prog, func() {}, nil
		}
		// A program array holds programs of its first one's kind,
		// expected attach type included (6.x): SEC("xdp"), AttachXDP.
		r, err := newRestorer(prog, ebpf.AttachXDP, sub.frame, seq)
		if err != nil {
			return nil, nil, err
		}
		return r.prog, r.close, nil
	}
	prog, closeR, err := wrap(b.Program())
	if err != nil {
		return nil, err
	}
	sub.prog = prog
	closeB := sub.close
	sub.close = func() { closeR(); closeB() }
	if p.fresh {
		forget, closeConns, err := forgetter(b.Program(), seq, sub.frame)
		if err != nil {
			return nil, err
		}
		sub.reprime = forget
		closeB := sub.close
		sub.close = func() { closeConns(); closeB() }
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
	// The base's program runs on this balancer's maps (its counters, its
	// connection table, the same source counter): with tables of their
	// own, each side's new flows evicted from its own 65,536 entries,
	// and where the kernel put each table moved a side's figure for a
	// whole run (measured: +10.7% of itself, tables filled on every
	// CPU, load average 3).
	sub.beside = func(spec *ebpf.CollectionSpec) (*subject, error) {
		bp, err := onMapsOf(b.Program(), spec)
		if err != nil {
			return nil, err
		}
		prog, closeR, err := wrap(bp)
		if err != nil {
			bp.Close()
			return nil, err
		}
		return &subject{prog: prog, frame: sub.frame, reprime: sub.reprime, tally: sub.tally, what: sub.what, close: func() { closeR(); bp.Close() }}, nil
	}
	ok = true
	return sub, nil
}

// restorer is a program that undoes the balancer's encapsulation of
// frame, if the last run left it encapsulated, and tail-calls the
// balancer: bpf_xdp_adjust_head by the outer header's size and frame's
// Ethernet header written back (the inner packet is where it was). With
// seq, the source address's last 32 bits become the counter seq holds
// before the call, so every packet, in this test run and the next (each
// starts from frame again), and of either side, is a new flow.
type restorer struct {
	prog *ebpf.Program
	next *ebpf.Map
}

func (r restorer) close() {
	r.prog.Close()
	r.next.Close()
}

func newRestorer(target *ebpf.Program, attach ebpf.AttachType, frame []byte, seq *ebpf.Map) (*restorer, error) {
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
	if seq != nil {
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
		return nil, fmt.Errorf("restorer: %w", err)
	}
	return &restorer{prog: prog, next: next}, nil
}

// forgetter returns a reprime for the new-flow path: it deletes from the
// connection table the flows the restorer's counter (seq) made since the
// last call, so the table never fills and every new flow takes a free
// entry. A full table would evict one entry per new flow: kernel work
// (the LRU lists) that costs about 1 µs here and varied by 20-50%
// between rounds with where the entries lay in memory, so the program
// timed against itself came out over +10% in 1 run of 20 even with four
// times the packets; the program's own work (the miss, the ring, the
// insert) is what a change to bpf/ moves.
func forgetter(prog *ebpf.Program, seq *ebpf.Map, frame []byte) (func() error, func(), error) {
	conns, err := mapOf(prog, bpf.XdplbMapConns)
	if err != nil {
		return nil, nil, err
	}
	// The flow as the program reads it: words and ports in memory order.
	key := bpf.XdplbFlow{Proto: frame[14+9]}
	key.Dst[0] = binary.LittleEndian.Uint32(frame[14+16:])
	key.Sport = binary.LittleEndian.Uint16(frame[14+20:])
	key.Dport = binary.LittleEndian.Uint16(frame[14+22:])
	var done uint32
	return func() error {
		var now uint32
		if err := seq.Lookup(uint32(0), &now); err != nil {
			return fmt.Errorf("source counter: %w", err)
		}
		var keys []bpf.XdplbFlow
		for v := done + 1; v != now+1; v++ {
			k := key
			k.Src[0] = v
			keys = append(keys, k)
		}
		done = now
		for len(keys) > 0 {
			n, err := conns.BatchDelete(keys, nil)
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				keys = keys[n+1:] // evicted: nothing to forget
				continue
			}
			if err != nil {
				return fmt.Errorf("forget new flows: %w", err)
			}
			break
		}
		return nil
	}, func() { conns.Close() }, nil
}

// onMapsOf loads the xdplb program of spec (the base's build of
// bpf/xdplb.c) on the maps prog uses, each of spec's maps by its name: a
// map the base has and prog has not fails the load rather than getting
// a table of its own.
func onMapsOf(prog *ebpf.Program, spec *ebpf.CollectionSpec) (*ebpf.Program, error) {
	repl := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range repl {
			m.Close()
		}
	}()
	for name := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue // global data: the base's own
		}
		m, err := mapOf(prog, name)
		if err != nil {
			return nil, err
		}
		repl[name] = m
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"xdplb"`
	}
	if err := bpf.Load(spec, nil, &objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return nil, fmt.Errorf("load the base's xdplb on this balancer's maps: %w", err)
	}
	return objs.Prog, nil
}

// mapOf opens the map named name that prog uses.
func mapOf(prog *ebpf.Program, name string) (*ebpf.Map, error) {
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, errors.New("program info: no map ids")
	}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			return nil, err
		}
		if mi, err := m.Info(); err == nil && mi.Name == name {
			return m, nil
		}
		m.Close()
	}
	return nil, fmt.Errorf("program %s uses no map %s", prog, name)
}
