package storm

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/topo"
)

// Addresses of a storm. Two veth pairs join the namespaces: the storm link
// (edge0 <-> storm0) carries the generators' frames, the client link
// (edge1 <-> client0) the legitimate client's requests. The shield is
// attached to both edge ends and shares one set of maps; the edge's stack,
// listener and CPUs are shared too. Only the veth rings are not: a veth
// ring holds 256 frames, and a generator on the same 2-core machine
// overflows it in bursts whatever the shield does (the loss is upstream of
// any XDP program, as a saturated uplink's would be), so the client gets its
// own ring, as it would get its own NIC queue under RSS.
//
// Every generated source is off-link for the edge, which has no default
// route: its routes to 198.18.0.0/15 and 2001:db8::/32 lead to the storm
// namespace, which does not forward, so what the edge answers forged sources
// with dies there.
var (
	Edge4   = netip.MustParseAddr("198.18.0.1") // edge0: the storm's target
	Edge6   = netip.MustParseAddr("2001:db8::1")
	Gate4   = netip.MustParseAddr("198.18.0.254") // storm0: where the edge's answers go
	Gate6   = netip.MustParseAddr("2001:db8::fe")
	Front4  = netip.MustParseAddr("198.18.4.1") // edge1: what the client dials
	Front6  = netip.MustParseAddr("2001:db8:0:4::1")
	Client4 = netip.MustParseAddr("198.18.4.2") // client0: the legitimate client
	Client6 = netip.MustParseAddr("2001:db8:0:4::2")

	// Allow- and deny-listed sources, sent by the generator.
	Allowed4 = netip.MustParseAddr("198.18.2.1")
	Allowed6 = netip.MustParseAddr("2001:db8:0:2::1")
	Denied4  = netip.MustParseAddr("198.18.3.1")
	Denied6  = netip.MustParseAddr("2001:db8:0:3::1")

	// Few sources: up to 16 per family from here (IPv6: one /64 each,
	// 2001:db8:0:100::/64 onwards; see Flow).
	Few4 = netip.MustParseAddr("198.18.1.1")
	Few6 = netip.MustParseAddr("2001:db8:0:100::1")

	// Many forged sources: IPv4 has only 198.19.0.0/16 (65,536) to forge
	// from inside the benchmarking range; IPv6 forges millions of /64s,
	// from 2001:db8:1::/64 onwards (4,194,304 of them end at
	// 2001:db8:40:ffff::/64).
	Many4 = netip.MustParseAddr("198.19.0.0")
	Many6 = netip.MustParseAddr("2001:db8:1::1")
)

// EdgePort is the HTTPS port of the edge server (and of the SYN flood).
const EdgePort = 443

// DatagramPort is the edge's UDP request/response service (a resolver, a
// QUIC server): the legitimate client asks it, and the storm's UDP frames
// are aimed at it.
const DatagramPort = 53

// MaxMany4 is how many IPv4 sources the many-forged storm can use.
const MaxMany4 = 1 << 16

// Interface names inside the two namespaces.
const (
	EdgeDev   = "edge0"   // storm link, edge end
	StormDev  = "storm0"  // storm link, generator end
	FrontDev  = "edge1"   // client link, edge end
	ClientDev = "client0" // client link, client end
)

// Topology is the edge and storm namespaces joined by two veth pairs.
type Topology struct {
	Edge, Storm   *topo.NS
	EdgeMAC       net.HardwareAddr
	StormMAC      net.HardwareAddr
	EdgeIfindex   int  // edge0
	FrontIfindex  int  // edge1
	StormIfindex  int  // storm0
	RPS           bool // receive packet steering spreads edge0's stack work over every core
	closed        bool
	removedStales []string
}

// NewTopology removes what a crashed run left, then creates the namespaces,
// the veth pairs, the addresses and routes, and turns GRO on at the edge
// ends (a veth only accepts XDP_TX/redirected frames from its peer when it
// runs NAPI: an attached XDP program or GRO turns it on, and the contrast
// run has no program).
func NewTopology() (*Topology, error) {
	return NewTopologyIn(LocalNamespaces{})
}

// Namespaces provides a topology's two namespaces (a deployment of
// e2e/parts does).
type Namespaces interface {
	// Namespaces returns the edge and storm namespaces, with nothing in
	// them but loopback: NewTopologyIn wires them.
	Namespaces() (edge, storm *topo.NS, err error)
}

// LocalNamespaces creates the two namespaces in this process.
type LocalNamespaces struct{}

// Namespaces creates the edge and storm namespaces.
func (LocalNamespaces) Namespaces() (edge, storm *topo.NS, err error) {
	if edge, err = topo.New("edge"); err != nil {
		return nil, nil, err
	}
	if storm, err = topo.New("storm"); err != nil {
		edge.Close()
		return nil, nil, err
	}
	return edge, storm, nil
}

// NewTopologyIn is NewTopology in the namespaces d provides.
func NewTopologyIn(d Namespaces) (t *Topology, err error) {
	removed, err := topo.CleanupStale()
	if err != nil {
		slog.Warn("remove stale namespaces", logErr, err)
	}
	if len(removed) > 0 {
		slog.Info("removed namespaces of a crashed run", logNS, removed)
	}
	t = &Topology{removedStales: removed}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.Edge, t.Storm, err = d.Namespaces(); err != nil {
		return nil, err
	}
	if err := topo.Veth(t.Storm, StormDev, t.Edge, EdgeDev); err != nil {
		return nil, err
	}
	if err := topo.Veth(t.Storm, ClientDev, t.Edge, FrontDev); err != nil {
		return nil, err
	}
	for _, a := range []struct {
		ns   *topo.NS
		dev  string
		addr netip.Addr
		bits int
	}{
		{t.Edge, EdgeDev, Edge4, 24},
		{t.Edge, EdgeDev, Edge6, 64},
		{t.Storm, StormDev, Gate4, 24},
		{t.Storm, StormDev, Gate6, 64},
		{t.Edge, FrontDev, Front4, 24},
		{t.Edge, FrontDev, Front6, 64},
		{t.Storm, ClientDev, Client4, 24},
		{t.Storm, ClientDev, Client6, 64},
	} {
		if err := a.ns.AddAddr(a.dev, netip.PrefixFrom(a.addr, a.bits).String()); err != nil {
			return nil, err
		}
	}
	for _, r := range []struct {
		dst netip.Prefix
		via netip.Addr
	}{{safe4, Gate4}, {safe6, Gate6}} {
		if err := t.Edge.Do(func() error { return addRoute(EdgeDev, r.dst.String(), r.via.String()) }); err != nil {
			return nil, fmt.Errorf("route %s via %s in %s: %w", r.dst, r.via, t.Edge.Name, err)
		}
	}
	// The storm namespace swallows the edge's answers to generated sources
	// silently: without these, IPv6 would answer each with an ICMPv6
	// "no route" (sent even when not forwarding), which the shield would
	// count beside the storm.
	for _, p := range []netip.Prefix{safe4, safe6} {
		if err := t.Storm.Do(func() error { return addBlackhole(p.String()) }); err != nil {
			return nil, fmt.Errorf("blackhole %s in %s: %w", p, t.Storm.Name, err)
		}
	}
	if t.EdgeMAC, err = t.Edge.HardwareAddr(EdgeDev); err != nil {
		return nil, err
	}
	if t.StormMAC, err = t.Storm.HardwareAddr(StormDev); err != nil {
		return nil, err
	}
	if t.EdgeIfindex, err = t.Edge.LinkIndex(EdgeDev); err != nil {
		return nil, err
	}
	if t.FrontIfindex, err = t.Edge.LinkIndex(FrontDev); err != nil {
		return nil, err
	}
	if t.StormIfindex, err = t.Storm.LinkIndex(StormDev); err != nil {
		return nil, err
	}
	for _, dev := range []string{EdgeDev, FrontDev} {
		if err := t.Edge.Do(func() error { return setGRO(dev, true) }); err != nil {
			return nil, fmt.Errorf("gro on %s: %w", dev, err)
		}
	}
	// RPS on the storm link: what the XDP stage passes is handed to the
	// stack on every core by flow hash, as RSS spreads a NIC's queues over
	// an edge's cores. Without it a veth does all of the edge's receive work
	// in softirq on the sender's core, so a storm would slow the generator
	// instead of the edge.
	mask := fmt.Sprintf("%x", (1<<min(runtime.NumCPU(), 32))-1)
	// Best effort: sysfs shows a namespace's devices only when mounted from
	// inside it, which `ip netns exec` does; a VM's initramfs may lack it.
	//
	// A container's namespace (the container lane) has its sysfs
	// superblock read-only, made so by the container runtime's mount of
	// it: `ip netns exec` mounts that same superblock, so it is made
	// writable first, inside the private mount namespace ip netns exec
	// runs the command in (the container's own mount stays read-only).
	write := "echo " + mask + " > /sys/class/net/" + EdgeDev + "/queues/rx-0/rps_cpus"
	if out, err := t.Edge.Command("sh", "-c", "("+write+") 2>/dev/null || { mount -o remount,rw /sys && "+write+"; }").CombinedOutput(); err != nil {
		slog.Warn("no RPS on the storm link: the edge's stack work stays on the generator's core", logDev, EdgeDev, logErr, fmt.Sprintf("%v: %s", err, out))
	} else {
		t.RPS = true
	}
	return t, nil
}

// RemovedStale names the namespaces of crashed runs NewTopology removed.
func (t *Topology) RemovedStale() []string { return t.removedStales }

// Close removes both namespaces (and the veth pair with them). Safe to call
// more than once.
func (t *Topology) Close() error {
	if t == nil || t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for _, ns := range []*topo.NS{t.Storm, t.Edge} {
		if ns != nil {
			errs = append(errs, ns.Close())
		}
	}
	return errors.Join(errs...)
}

// LinkStats are the counters of one veth end.
type LinkStats struct {
	RxPackets uint64 `json:"rx_packets"`
	RxDropped uint64 `json:"rx_dropped"`
	TxPackets uint64 `json:"tx_packets"`
	TxDropped uint64 `json:"tx_dropped"`
}

func (s LinkStats) Sub(o LinkStats) LinkStats {
	return LinkStats{s.RxPackets - o.RxPackets, s.RxDropped - o.RxDropped, s.TxPackets - o.TxPackets, s.TxDropped - o.TxDropped}
}

// VethCounters are the counters of the veth ends that matter.
type VethCounters struct {
	Edge  LinkStats // edge0
	Front LinkStats // edge1
	Storm LinkStats // storm0
}

// VethStats reads edge0, edge1 and storm0.
//
// What the storm link itself dropped is storm0's tx_dropped: a veth counts
// there what its peer's ring refused (XDP xmit errors of redirected
// frames) and skbs it could not hand over, i.e. frames the edge's XDP stage
// never saw. edge0's rx_dropped is no such measure: it also counts what the
// stack dropped after the shield passed it (an RPS backlog overflow, say).
func (t *Topology) VethStats() (VethCounters, error) {
	var c VethCounters
	read := func(ns *topo.NS, devs map[string]*LinkStats) error {
		return ns.Do(func() error {
			for dev, out := range devs {
				l, err := netlink.LinkByName(dev)
				if err != nil {
					return fmt.Errorf("find %s: %w", dev, err)
				}
				s := l.Attrs().Statistics
				if s == nil {
					return fmt.Errorf("%s has no statistics", dev)
				}
				*out = LinkStats{s.RxPackets, s.RxDropped, s.TxPackets, s.TxDropped}
			}
			return nil
		})
	}
	if err := read(t.Edge, map[string]*LinkStats{EdgeDev: &c.Edge, FrontDev: &c.Front}); err != nil {
		return c, err
	}
	return c, read(t.Storm, map[string]*LinkStats{StormDev: &c.Storm})
}

func addRoute(dev, dst, via string) error {
	l, err := netlink.LinkByName(dev)
	if err != nil {
		return err
	}
	_, n, err := net.ParseCIDR(dst)
	if err != nil {
		return err
	}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: n, Gw: net.ParseIP(via)})
}

func addBlackhole(dst string) error {
	_, n, err := net.ParseCIDR(dst)
	if err != nil {
		return err
	}
	return netlink.RouteAdd(&netlink.Route{Dst: n, Type: unix.RTN_BLACKHOLE})
}

// StormGRO switches GRO on the storm link's edge end. With it off and no
// XDP program attached the veth runs no NAPI and refuses every frame the
// generator hands it: what is left is the generator's own cost, the rate
// the study prints beside every drop-capacity figure.
func (t *Topology) StormGRO(on bool) error {
	return t.Edge.Do(func() error { return setGRO(EdgeDev, on) })
}

// setGRO switches generic receive offload on dev in the calling thread's
// namespace with the legacy ETHTOOL_SGRO ioctl (no ethtool binary needed).
func setGRO(dev string, on bool) error {
	const ethtoolSGRO = 0x0000002c
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	val := struct{ cmd, data uint32 }{ethtoolSGRO, 0}
	if on {
		val.data = 1
	}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(ifr.name[:], dev)
	ifr.data = uintptr(unsafe.Pointer(&val))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("SIOCETHTOOL ETHTOOL_SGRO: %w", errno)
	}
	return nil
}
