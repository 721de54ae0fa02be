package study

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/lb/maglev"
	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/study/results"
	"github.com/xdpshield/xdpshield/xdplb"
)

// lbRuns: -quick makes one run (it checks that every target handled
// frames, nothing more).
func (s *study) lbRuns() int {
	if s.opt.Quick {
		return 1
	}
	return s.opt.Runs
}

func (s *study) lbSteps() int { return s.lbRuns() * len(results.ListFamilies) * len(results.LBTargets) }

// movedShares computes, for n backends of which the last goes, the share
// of the balancer's table (new flows) whose backend changes, and what
// hashing modulo n (nftables' `jhash ... mod n`) moves.
func movedShares() []results.Moved {
	var out []results.Moved
	for _, n := range []int{3, 5, 10} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("198.18.1.%d", i+1)
		}
		before := maglev.Table(names, nil, xdplb.RingSize)
		after := maglev.Table(names[:n-1], nil, xdplb.RingSize)
		moved, mod := 0, 0
		for i := range before {
			if names[before[i]] != names[after[i]] {
				moved++
			}
			if i%n != i%(n-1) {
				mod++
			}
		}
		// nft_jhash: reciprocal_scale over hashes spread evenly.
		const grid = 1 << 16
		scaled := 0
		for i := range uint64(grid) {
			h := i << 16
			if h*uint64(n)>>32 != h*uint64(n-1)>>32 {
				scaled++
			}
		}
		out = append(out, results.Moved{N: n, Maglev: float64(moved) / float64(len(before)), Modulo: float64(mod) / float64(len(before)), NFT: float64(scaled) / grid})
	}
	return out
}

// lbSection measures each target's packet rate on edge0 from the
// generator's UDP frames to the edge's datagram port (the VIP).
func (s *study) lbSection(ctx context.Context) error {
	res := &results.LBResults{Moved: movedShares()}
	s.res.LB = res
	// storm0 drops what edge0 sends back (XDP_TX): a veth delivers XDP_TX
	// frames to a peer that runs NAPI, and this keeps them out of the
	// storm namespace's stack. It also repairs what the encapsulation
	// wrote over the generator's frame, see repairProgram.
	back, err := repairProgram(s.top.EdgeMAC, s.top.StormMAC)
	if err != nil {
		return err
	}
	defer back.Close()
	var bl link.Link
	if err := s.top.Storm.Do(func() (err error) {
		bl, err = link.AttachXDP(link.XDPOptions{Program: back, Interface: s.top.StormIfindex})
		return err
	}); err != nil {
		return fmt.Errorf("xdplb: XDP_DROP on storm0: %w", err)
	}
	defer bl.Close()
	for run := range s.lbRuns() {
		for _, fam := range results.ListFamilies {
			for i := range results.LBTargets {
				t := results.LBTargets[(i+run)%len(results.LBTargets)]
				tpl, err := s.listTemplate(fam, int(results.LBFlows(t)))
				if err != nil {
					return err
				}
				s.bar.step(fmt.Sprintf("run %d/%d xdplb %s %s", run+1, s.lbRuns(), fam, t))
				if err := s.lbRate(ctx, run, res.AddCell(t, fam), t, tpl); err != nil {
					return fmt.Errorf("xdplb %s %s: %w", t, fam, err)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	return nil
}

// repairProgram drops every frame, after writing the template's Ethernet
// header back where it was in the ones xdplb encapsulated (IPIP: 20 bytes
// after the outer frame's start, IP6IP6: 40). The live-frames generator
// recycles its pages with whatever was written into them (bpf/storm.c
// rewrites only the source and checksums), and the encapsulation writes
// the outer IP header over the frame's own Ethernet header: without the
// repair, the generator's next frames from those pages are not IP, and
// the balancer passes them to the stack (measured: 0.37 Mpps sent, 3% of
// it balanced). The inner packet is left as it was sent.
func repairProgram(edge, storm net.HardwareAddr) (*ebpf.Program, error) {
	le32 := func(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) }
	le16 := func(b []byte) int16 { return int16(binary.LittleEndian.Uint16(b)) }
	ins := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+40+14),
		asm.JGT.Reg(asm.R4, asm.R3, "drop"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half), // EtherType, as stored
		asm.JEq.Imm(asm.R5, 0x0008, "v4"),
		asm.JEq.Imm(asm.R5, int32(0xdd86), "v6"),
		asm.Ja.Label("drop"),
		asm.LoadMem(asm.R6, asm.R2, 14+9, asm.Byte).WithSymbol("v4"), // protocol
		asm.JNE.Imm(asm.R6, 4, "drop"),                               // not IPIP: not encapsulated
		asm.Add.Imm(asm.R2, 20),
		asm.Ja.Label("fix"),
		asm.LoadMem(asm.R6, asm.R2, 14+6, asm.Byte).WithSymbol("v6"), // next header
		asm.JNE.Imm(asm.R6, 41, "drop"),                              // not IP6IP6
		asm.Add.Imm(asm.R2, 40),
		asm.StoreImm(asm.R2, 0, int64(le32(edge[0:4])), asm.Word).WithSymbol("fix"),
		asm.StoreImm(asm.R2, 4, int64(le16(edge[4:6])), asm.Half),
		asm.StoreImm(asm.R2, 6, int64(le32(storm[0:4])), asm.Word),
		asm.StoreImm(asm.R2, 10, int64(le16(storm[4:6])), asm.Half),
		asm.StoreMem(asm.R2, 12, asm.R5, asm.Half), // the inner family's, same as the outer
		asm.Mov.Imm(asm.R0, int32(sim.Drop)).WithSymbol("drop"),
		asm.Return(),
	}
	return ebpf.NewProgram(&ebpf.ProgramSpec{Name: "xdp_lb_repair", Type: ebpf.XDP, License: "GPL", Instructions: ins})
}

// txProgram returns XDP_TX: the frame goes back out unmodified.
func txProgram() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xdp_tx_ref", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 3), asm.Return()},
	})
}

// lbConfig balances the edge's datagram port on Edge4 and Edge6 over
// LBBackends addresses nobody holds, encapsulated towards storm0.
func (s *study) lbConfig() xdplb.Config {
	var b4, b6 []xdplb.Backend
	for i := range results.LBBackends {
		b4 = append(b4, xdplb.Backend{Addr: netip.AddrFrom4([4]byte{198, 18, 210, byte(i + 1)})})
		b6 = append(b6, xdplb.Backend{Addr: netip.MustParseAddr(fmt.Sprintf("2001:db8:210::%d", i+1))})
	}
	return xdplb.Config{NextHop: xdplb.MAC(s.top.StormMAC), Source4: storm.Edge4, Source6: storm.Edge6, MTU: 1500,
		VIPs: []xdplb.VIP{
			{Addr: storm.Edge4, Port: storm.DatagramPort, Proto: "udp", Backends: b4},
			{Addr: storm.Edge6, Port: storm.DatagramPort, Proto: "udp", Backends: b6},
		}}
}

func (s *study) lbRate(ctx context.Context, run int, c *results.LBCell, target string, tpl storm.Template) error {
	var prog *ebpf.Program
	var count func() (uint64, error)
	var reasons func() (map[string]uint64, error)
	switch target {
	case "drop", "tx":
		var err error
		if target == "drop" {
			prog, err = sim.DropProgram()
		} else {
			prog, err = txProgram()
		}
		if err != nil {
			return err
		}
		defer prog.Close()
	case "xdplb", "xdplb-16":
		b, err := xdplb.Load()
		if err != nil {
			return err
		}
		defer b.Close()
		if err := b.Apply(s.lbConfig()); err != nil {
			return err
		}
		prog = b.Program()
		reasons = func() (map[string]uint64, error) {
			st, err := b.Stats()
			return st.Reasons, err
		}
		count = func() (uint64, error) {
			r, err := reasons()
			return r["tx"], err
		}
	default:
		return fmt.Errorf("unknown xdplb target %q", target)
	}
	var l link.Link
	if err := s.top.Edge.Do(func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: s.top.EdgeIfindex})
		return err
	}); err != nil {
		return err
	}
	defer l.Close()
	var d0 uint64
	if count != nil {
		var err error
		if d0, err = count(); err != nil {
			return err
		}
	}
	phase := s.opt.DropPhase
	if s.opt.Quick {
		phase /= 2
	}
	d, _, err := s.dropPhase(ctx, run, []storm.Template{tpl}, nil, phase, s.edge.Machine)
	if err != nil {
		return err
	}
	if count == nil {
		d.Dropped = d.Seen
	} else {
		d1, err := count()
		if err != nil {
			return err
		}
		d.Dropped = d1 - d0
	}
	if reasons != nil {
		r, err := reasons()
		if err != nil {
			return err
		}
		c.Reasons = append(c.Reasons, r)
	}
	d.Rates()
	c.Samples = append(c.Samples, d)
	return nil
}
