package e2e

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xdpshield/internal/topo"
)

// Addresses of a storm. Edge and client share on-link /24 and /64 prefixes;
// every generated source is off-link for the edge, which has no default
// route, so nothing it answers a forged source with can leave the edge.
var (
	Edge4   = netip.MustParseAddr("198.18.0.1")
	Edge6   = netip.MustParseAddr("2001:db8::1")
	Client4 = netip.MustParseAddr("198.18.0.2")
	Client6 = netip.MustParseAddr("2001:db8::2")

	// Allow- and deny-listed probe sources, sent by the generator.
	Allowed4 = netip.MustParseAddr("198.18.2.1")
	Allowed6 = netip.MustParseAddr("2001:db8:0:2::1")
	Denied4  = netip.MustParseAddr("198.18.3.1")
	Denied6  = netip.MustParseAddr("2001:db8:0:3::1")

	// Few sources: up to 16 per family from here.
	Few4 = netip.MustParseAddr("198.18.1.1")
	Few6 = netip.MustParseAddr("2001:db8:0:1::1")

	// Many forged sources: IPv4 has only 198.19.0.0/16 (65,536) to forge
	// from inside the benchmarking range; IPv6 forges millions from
	// 2001:db8:1::/96.
	Many4 = netip.MustParseAddr("198.19.0.0")
	Many6 = netip.MustParseAddr("2001:db8:1::")
)

// EdgePort is the HTTPS port of the edge server (and of the SYN flood).
const EdgePort = 443

// MaxMany4 is how many IPv4 sources the many-forged storm can use.
const MaxMany4 = 1 << 16

// Interface names inside the two namespaces.
const (
	EdgeDev  = "edge0"
	StormDev = "storm0"
)

// Topology is the edge and storm namespaces joined by one veth pair.
type Topology struct {
	Edge, Storm   *topo.NS
	EdgeMAC       net.HardwareAddr
	StormMAC      net.HardwareAddr
	EdgeIfindex   int
	StormIfindex  int
	closed        bool
	removedStales []string
}

// NewTopology removes what a crashed run left, then creates the namespaces,
// the veth pair, the addresses, and turns GRO on at the edge end (a veth
// only accepts XDP_TX/redirected frames from its peer when it runs NAPI: an
// attached XDP program or GRO turns it on, and the contrast run has no
// program).
func NewTopology() (t *Topology, err error) {
	removed, err := topo.CleanupStale()
	if err != nil {
		slog.Warn("remove stale namespaces", "err", err)
	}
	if len(removed) > 0 {
		slog.Info("removed namespaces of a crashed run", "namespaces", removed)
	}
	t = &Topology{removedStales: removed}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.Edge, err = topo.New("edge"); err != nil {
		return nil, err
	}
	if t.Storm, err = topo.New("storm"); err != nil {
		return nil, err
	}
	if err := topo.Veth(t.Storm, StormDev, t.Edge, EdgeDev); err != nil {
		return nil, err
	}
	for _, a := range []struct {
		ns   *topo.NS
		dev  string
		cidr string
	}{
		{t.Edge, EdgeDev, Edge4.String() + "/24"},
		{t.Edge, EdgeDev, Edge6.String() + "/64"},
		{t.Storm, StormDev, Client4.String() + "/24"},
		{t.Storm, StormDev, Client6.String() + "/64"},
	} {
		if err := a.ns.AddAddr(a.dev, a.cidr); err != nil {
			return nil, err
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
	if t.StormIfindex, err = t.Storm.LinkIndex(StormDev); err != nil {
		return nil, err
	}
	if err := t.Edge.Do(func() error { return setGRO(EdgeDev, true) }); err != nil {
		return nil, fmt.Errorf("gro on %s: %w", EdgeDev, err)
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
	return errors.Join(t.Storm.Close(), t.Edge.Close())
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

// VethStats reads both ends of the pair.
func (t *Topology) VethStats() (edge, storm LinkStats, err error) {
	read := func(ns interface{ Do(func() error) error }, dev string, out *LinkStats) error {
		return ns.Do(func() error {
			l, err := netlink.LinkByName(dev)
			if err != nil {
				return fmt.Errorf("find %s: %w", dev, err)
			}
			s := l.Attrs().Statistics
			if s == nil {
				return fmt.Errorf("%s has no statistics", dev)
			}
			*out = LinkStats{s.RxPackets, s.RxDropped, s.TxPackets, s.TxDropped}
			return nil
		})
	}
	if err := read(t.Edge, EdgeDev, &edge); err != nil {
		return edge, storm, err
	}
	return edge, storm, read(t.Storm, StormDev, &storm)
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
