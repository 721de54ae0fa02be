package storm

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// Generator puts frames on the storm-side veth.
type Generator interface {
	// Name says which generator this is ("xdp-live-frames", "af_packet").
	Name() string
	// Send sends n copies of t, continuing the generator's source cycle,
	// and returns how many frames it handed to the device.
	Send(t *Template, n uint32) (uint64, error)
	Close() error
}

// NewGenerator returns the XDP live-frames generator where the kernel runs
// BPF_F_TEST_XDP_LIVE_FRAMES (5.18+, probed: builds differ) and the
// AF_PACKET one elsewhere, or the one named by kind ("xdp", "af_packet").
func NewGenerator(kind string, ns *topo.NS, ifindex int) (Generator, error) {
	switch kind {
	case "", "auto":
		if features.LiveFrames.Check() == nil {
			return NewXDPGenerator(ns, ifindex)
		}
		return NewPacketGenerator(ns, ifindex)
	case "xdp":
		return NewXDPGenerator(ns, ifindex)
	case "af_packet":
		return NewPacketGenerator(ns, ifindex)
	}
	return nil, fmt.Errorf("unknown generator %q (want auto, xdp or af_packet)", kind)
}

// xdpMd mirrors struct xdp_md, the context of a test run.
type xdpMd struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// XDPGenerator runs bpf/storm.c with BPF_F_TEST_XDP_LIVE_FRAMES: each run of
// the program rewrites the source and returns XDP_TX, which in live-frames
// mode transmits out of the context's ingress device (the storm-side veth).
type XDPGenerator struct {
	objs    bpf.StormObjects
	ns      *topo.NS
	ifindex int
}

// NewXDPGenerator loads the generator; frames leave through ifindex in ns.
func NewXDPGenerator(ns *topo.NS, ifindex int) (*XDPGenerator, error) {
	g := &XDPGenerator{ns: ns, ifindex: ifindex}
	spec, err := bpf.LoadStorm()
	if err != nil {
		return nil, fmt.Errorf("load storm generator spec: %w", err)
	}
	if err := bpf.Load(spec, nil, &g.objs, nil); err != nil {
		return nil, fmt.Errorf("load storm generator: %w", err)
	}
	return g, nil
}

func (g *XDPGenerator) Name() string { return "xdp-live-frames" }
func (g *XDPGenerator) Close() error { return g.objs.Close() }

// Send runs the program n times on t. The program's own frame counter is the
// truth for what was sent: a run interrupted by a signal is restarted by
// cilium/ebpf and may send more than n.
func (g *XDPGenerator) Send(t *Template, n uint32) (uint64, error) {
	if n == 0 {
		return 0, nil
	}
	if err := g.configure(t); err != nil {
		return 0, err
	}
	before, after := t.Next, t.Next
	if err := g.objs.Seq.Set(before); err != nil {
		return 0, fmt.Errorf("set generator counter: %w", err)
	}
	// The ingress ifindex is resolved in the caller's namespace.
	err := g.ns.Do(func() error {
		_, err := g.objs.Storm.Run(&ebpf.RunOptions{
			Data:      t.Frame,
			Repeat:    n,
			Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
			Context:   xdpMd{DataEnd: uint32(len(t.Frame)), IngressIfindex: uint32(g.ifindex)},
			BatchSize: 256,
		})
		return err
	})
	if gerr := g.objs.Seq.Get(&after); gerr != nil && err == nil {
		err = fmt.Errorf("read generator counter: %w", gerr)
	}
	t.Next = after
	if err != nil {
		return after - before, fmt.Errorf("live-frames run: %w", err)
	}
	return after - before, nil
}

// configure makes t the frame the program rewrites.
func (g *XDPGenerator) configure(t *Template) error {
	cfg := bpf.StormStormConfig{
		Nsources:   t.Count,
		Base:       t.Base,
		AddrOff:    uint16(t.AddrOff),
		IpCsumOff:  uint16(t.IPCsumOff),
		L4CsumOff:  uint16(t.L4CsumOff),
		IpCsumBase: t.IPCsumBase,
		L4CsumBase: t.L4CsumBase,
	}
	if err := g.objs.Cfg.Set(cfg); err != nil {
		return fmt.Errorf("configure generator: %w", err)
	}
	return nil
}

// PacketGenerator writes frames to an AF_PACKET socket: the fallback for
// kernels before 5.18, about a tenth of the XDP generator's rate.
type PacketGenerator struct {
	fd  int
	buf []byte
}

// NewPacketGenerator opens a raw packet socket bound to ifindex in ns.
func NewPacketGenerator(ns *topo.NS, ifindex int) (*PacketGenerator, error) {
	g := &PacketGenerator{fd: -1}
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0) // protocol 0: send only
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		g.fd = fd
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(g.fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		unix.Close(g.fd)
		return nil, fmt.Errorf("bind packet socket: %w", err)
	}
	// Skip the qdisc, as a generator should (3.14+); best effort.
	_ = unix.SetsockoptInt(g.fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	return g, nil
}

func (g *PacketGenerator) Name() string { return "af_packet" }
func (g *PacketGenerator) Close() error { return unix.Close(g.fd) }

// Send writes n frames one by one. ENOBUFS is the veth refusing a frame it
// was handed (its peer's ring is full): the veth counts it in its
// tx_dropped, as it does the live-frames generator's refused frames, so it
// counts as sent here too, and ends the call early for the caller to back
// off.
func (g *PacketGenerator) Send(t *Template, n uint32) (uint64, error) {
	g.buf = append(g.buf[:0], t.Frame...)
	var sent uint64
	for i := uint32(0); i < n; i++ {
		t.Rewrite(g.buf, t.Next)
		t.Next++
		if _, err := unix.Write(g.fd, g.buf); err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				return sent + 1, nil
			}
			return sent, fmt.Errorf("write frame: %w", err)
		}
		sent++
	}
	return sent, nil
}

// Spec says what one storm sends, and its bounds.
type Spec struct {
	Templates []Template
	Weights   []float64     // share of each template; nil: equal
	Rate      uint64        // frames per second; 0: as fast as the generator goes
	Duration  time.Duration // bound in time
	MaxFrames uint64        // bound in frames
}

// chunk is the most frames one generator call sends. A live-frames run
// costs about 28 ms on top of its frames here, whatever their number (its
// page pool is torn down after an RCU grace period), so calls must be large
// to reach a rate; 65,536 frames take 10-15 ms more at 5 Mpps, and a
// deadline or Ctrl-C is seen within one call. Paced storms send what is due
// in as few calls as there are flows.
const chunk = 1 << 16

// tick is the pacing period.
const tick = 10 * time.Millisecond

// Run runs spec on g until its duration, frame bound or ctx ends and
// returns frames sent per template. sent is updated as it goes (for a live
// progress line); it may be nil.
func Run(ctx context.Context, g Generator, spec Spec, sent *atomic.Uint64) ([]uint64, error) {
	if spec.Duration <= 0 || spec.MaxFrames == 0 {
		return nil, fmt.Errorf("storm must be bounded: duration %v, max frames %d", spec.Duration, spec.MaxFrames)
	}
	if len(spec.Templates) == 0 {
		return nil, errors.New("storm has no flows")
	}
	if sent == nil {
		sent = new(atomic.Uint64)
	}
	w := spec.Weights
	if w == nil {
		w = make([]float64, len(spec.Templates))
		for i := range w {
			w[i] = 1
		}
	}
	var total float64
	for _, x := range w {
		total += x
	}
	per := make([]uint64, len(spec.Templates))
	var all uint64
	start := time.Now()
	deadline := start.Add(spec.Duration)
	for {
		now := time.Now()
		if ctx.Err() != nil || !now.Before(deadline) || all >= spec.MaxFrames {
			return per, nil
		}
		// At full speed, look a chunk per template ahead, so each call
		// sends up to a chunk: a live-frames run has a fixed cost (page
		// pool set-up, namespace switch) worth amortising.
		budget := uint64(chunk * len(spec.Templates))
		if spec.Rate > 0 {
			due := uint64(now.Sub(start).Seconds() * float64(spec.Rate))
			if due <= all {
				time.Sleep(tick)
				continue
			}
			budget = min(due-all, uint64(chunk*len(spec.Templates)))
		}
		budget = min(budget, spec.MaxFrames-all)
		// Give each template its share of the total so far, so small
		// shares are not rounded away.
		target := all + budget
		short := false // a call sent less than asked: the device is full
		progress := false
		for i := range spec.Templates {
			want := uint64(float64(target) * w[i] / total)
			if want <= per[i] {
				continue
			}
			n := min(want-per[i], budget, chunk)
			if n == 0 {
				continue
			}
			got, err := g.Send(&spec.Templates[i], uint32(n))
			per[i] += got
			all += got
			progress = progress || got > 0
			short = short || got < n
			budget -= min(got, budget)
			sent.Add(got)
			if err != nil {
				return per, err
			}
		}
		if !progress || short {
			// Nothing due, or the device refuses frames: wait rather
			// than spin (what was refused stays due, and is counted
			// only once sent).
			time.Sleep(tick)
		}
	}
}
