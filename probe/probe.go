package probe

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
)

// Slots is the number of histogram slots; it mirrors HIST_SLOTS in
// bpf/probe.c.
const Slots = 168

// Options configure a probe at load time.
type Options struct {
	// Port, if not 0, times only flows to this port of the interface's
	// side (the edge's service port).
	Port uint16
	// Clsact attaches with a clsact qdisc even where TCX is available
	// (tests cover both paths on one kernel).
	Clsact bool
}

// Mode is how the probe is attached.
type Mode string

const (
	ModeTCX    Mode = "tcx"    // kernel 6.6+
	ModeClsact Mode = "clsact" // cls_bpf on a clsact qdisc, before 6.6
)

// Probe is a loaded probe, attached to at most one interface.
type Probe struct {
	clsact  bool
	objs    bpf.ProbeObjects
	mode    Mode
	links   []link.Link
	filters []*netlink.BpfFilter
	qdisc   *netlink.GenericQdisc // the clsact qdisc Attach created, if any
}

// Load loads the programs and maps; nothing is attached yet.
func Load(opts Options) (*Probe, error) {
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}
	spec, err := bpf.LoadProbe()
	if err != nil {
		return nil, fmt.Errorf("load probe spec: %w", err)
	}
	p := &Probe{clsact: opts.Clsact}
	if err := bpf.Load(spec, map[string]any{bpf.ProbeVarServerPort: opts.Port}, &p.objs, nil); err != nil {
		return nil, fmt.Errorf("load probe: %w", err)
	}
	return p, nil
}

// Mode says how the probe was attached ("" before Attach).
func (p *Probe) Mode() Mode { return p.mode }

// Attach puts the probe on ifindex in the calling thread's network
// namespace: TCX where the kernel has it, clsact otherwise.
func (p *Probe) Attach(ifindex int) error {
	if p.mode != "" {
		return errors.New("probe already attached")
	}
	in, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p.objs.ProbeIngress, Attach: ebpf.AttachTCXIngress})
	if err == nil && p.clsact {
		in.Close()
		err = ebpf.ErrNotSupported
	}
	if err == nil {
		out, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p.objs.ProbeEgress, Attach: ebpf.AttachTCXEgress})
		if err != nil {
			in.Close()
			return fmt.Errorf("attach probe (tcx egress) to ifindex %d: %w", ifindex, err)
		}
		p.links, p.mode = []link.Link{in, out}, ModeTCX
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("attach probe (tcx ingress) to ifindex %d: %w", ifindex, err)
	}
	if err := p.attachClsact(ifindex); err != nil {
		return fmt.Errorf("attach probe (clsact; no tcx before 6.6) to ifindex %d: %w", ifindex, err)
	}
	p.mode = ModeClsact
	return nil
}

func (p *Probe) attachClsact(ifindex int) error {
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	switch err := netlink.QdiscAdd(q); {
	case err == nil:
		p.qdisc = q
	case errors.Is(err, unix.EEXIST):
	default:
		return fmt.Errorf("add clsact qdisc: %w", err)
	}
	for _, f := range []struct {
		parent uint32
		prog   *ebpf.Program
		name   string
	}{
		{netlink.HANDLE_MIN_INGRESS, p.objs.ProbeIngress, "xdpshield_probe_in"},
		{netlink.HANDLE_MIN_EGRESS, p.objs.ProbeEgress, "xdpshield_probe_out"},
	} {
		flt := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: f.parent, Handle: 1, Protocol: unix.ETH_P_ALL, Priority: 1},
			Fd:          f.prog.FD(),
			Name:        f.name,
			// TC_ACT_UNSPEC from a direct-action filter: on to the next.
			DirectAction: true,
		}
		if err := netlink.FilterAdd(flt); err != nil {
			p.detach()
			return fmt.Errorf("add %s filter: %w", f.name, err)
		}
		p.filters = append(p.filters, flt)
	}
	return nil
}

func (p *Probe) detach() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	for _, f := range p.filters {
		if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("delete filter %s: %w", f.Name, err))
		}
	}
	p.filters = nil
	if p.qdisc != nil {
		if err := netlink.QdiscDel(p.qdisc); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("delete clsact qdisc: %w", err))
		}
		p.qdisc = nil
	}
	return errors.Join(errs...)
}

// Close detaches the probe (in the calling thread's namespace, for clsact:
// call it where Attach was called) and frees its programs and maps.
func (p *Probe) Close() error {
	return errors.Join(p.detach(), p.objs.Close())
}

// Histogram counts requests per slot.
type Histogram [Slots]uint64

// SlotRange returns slot i's bounds in nanoseconds: [lo, hi).
func SlotRange(i int) (lo, hi uint64) {
	switch {
	case i < 4:
		return uint64(i), uint64(i) + 1
	case i < 8: // unused: 4 ns and up start at slot 8
		return 4, 4
	}
	l := uint(i / 4)
	w := uint64(1) << (l - 2)
	lo = uint64(1)<<l + uint64(i%4)*w
	return lo, lo + w
}

// SlotOf is the slot of a time of ns nanoseconds, as the program computes it.
func SlotOf(ns uint64) int {
	if ns < 4 {
		return int(ns)
	}
	l := 63 - bits.LeadingZeros64(ns)
	s := 4*l + int((ns>>(l-2))&3)
	return min(s, Slots-1)
}

// Count is the number of requests in h.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Add adds o into h.
func (h *Histogram) Add(o *Histogram) {
	for i := range h {
		h[i] += o[i]
	}
}

// Sub returns h - o (slot by slot): what came in between two readings.
func (h Histogram) Sub(o Histogram) Histogram {
	for i := range h {
		h[i] -= o[i]
	}
	return h
}

// Quantile returns the q-quantile, interpolated linearly inside its slot:
// at most a quarter of the slot's lower bound from the true value. 0 when
// h is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	var seen float64
	for i, c := range h {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := SlotRange(i)
			frac := (rank - seen) / float64(c)
			return time.Duration(float64(lo) + frac*float64(hi-lo))
		}
		seen += float64(c)
	}
	lo, _ := SlotRange(Slots - 1)
	return time.Duration(lo)
}

// Histogram reads every flow's times together (summed over CPUs).
func (p *Probe) Histogram() (Histogram, error) {
	var h Histogram
	var per []uint64
	for i := uint32(0); i < Slots; i++ {
		if err := p.objs.Hist.Lookup(i, &per); err != nil {
			return h, fmt.Errorf("read histogram slot %d: %w", i, err)
		}
		for _, c := range per {
			h[i] += c
		}
	}
	return h, nil
}

// Stats are the probe's event counters.
type Stats struct {
	Requests uint64 `json:"requests"` // requests that started a clock
	Answered uint64 `json:"answered"` // answers matched to one
}

// Stats reads the event counters (summed over CPUs).
func (p *Probe) Stats() (Stats, error) {
	var s Stats
	for i, out := range []*uint64{&s.Requests, &s.Answered} {
		var per []uint64
		if err := p.objs.Stats.Lookup(uint32(i), &per); err != nil {
			return s, fmt.Errorf("read probe stats: %w", err)
		}
		for _, c := range per {
			*out += c
		}
	}
	return s, nil
}

// Flow is one flow's figures.
type Flow struct {
	Client    netip.AddrPort `json:"client"`
	Server    netip.AddrPort `json:"server"`
	Proto     string         `json:"proto"`
	Count     uint64         `json:"count"`
	Mean      time.Duration  `json:"mean_ns"`
	P50       time.Duration  `json:"p50_ns"`
	P99       time.Duration  `json:"p99_ns"`
	Histogram *Histogram     `json:"-"`
}

func addr(b [16]uint8) netip.Addr { return netip.AddrFrom16(b).Unmap() }

// Flows reads every flow's figures, busiest first.
func (p *Probe) Flows() ([]Flow, error) {
	var out []Flow
	var k bpf.ProbeFlowKey
	var v bpf.ProbeFlowStats
	it := p.objs.Flows.Iterate()
	for it.Next(&k, &v) {
		h := new(Histogram)
		for i, c := range v.Hist {
			h[i] = uint64(c)
		}
		f := Flow{
			Client:    netip.AddrPortFrom(addr(k.Client), k.ClientPort),
			Server:    netip.AddrPortFrom(addr(k.Server), k.ServerPort),
			Proto:     map[uint8]string{unix.IPPROTO_TCP: "tcp", unix.IPPROTO_UDP: "udp"}[k.Proto],
			Count:     v.Count,
			P50:       h.Quantile(0.5),
			P99:       h.Quantile(0.99),
			Histogram: h,
		}
		if v.Count > 0 {
			f.Mean = time.Duration(v.SumNs / v.Count)
		}
		out = append(out, f)
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("read flows: %w", err)
	}
	slices.SortFunc(out, func(a, b Flow) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return a.Client.Compare(b.Client)
	})
	return out, nil
}

// Reset empties the histograms, flows and counters (between two
// measurements of one run).
func (p *Probe) Reset() error {
	zeros := make([]uint64, ebpfPossibleCPUs())
	for i := uint32(0); i < Slots; i++ {
		if err := p.objs.Hist.Put(i, zeros); err != nil {
			return fmt.Errorf("reset histogram: %w", err)
		}
	}
	for i := uint32(0); i < 2; i++ {
		if err := p.objs.Stats.Put(i, zeros); err != nil {
			return fmt.Errorf("reset stats: %w", err)
		}
	}
	var k bpf.ProbeFlowKey
	var keys []bpf.ProbeFlowKey
	var v bpf.ProbeFlowStats
	it := p.objs.Flows.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := p.objs.Flows.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("reset flows: %w", err)
		}
	}
	return nil
}

func ebpfPossibleCPUs() int {
	n, err := ebpf.PossibleCPU()
	if err != nil || n <= 0 {
		return 1
	}
	return n
}
