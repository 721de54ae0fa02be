package xdplb_test

// The balancer in namespaces: client -> router -> edge (xdplb on its veth,
// XDP_TX back to the router) -> router -> backends, which decapsulate
// (ipip, ip6tnl devices), hold the VIP on lo and answer the client
// directly (direct server return).
//
//	client (c0) --- (rc) router (re) --- (e0) edge [xdplb]
//	                       (r1) --- (b0) back1
//	                       (r2) --- (b0) back2

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/xdplb"
)

const (
	nsVIP4   = "198.18.100.1"
	nsVIP6   = "2001:db8:100::1"
	tcpPort  = 8080
	udpPort  = 8081
	nsFlows  = 8 // per kind (4 under -short); all on one backend by chance: 2^-15 at most
	nsWait   = 5 * time.Second
	clientMT = 1400 // room for the outer header within the veths' 1500
)

func ns(t testing.TB, role string) *topo.NS {
	t.Helper()
	n, err := topo.New(role)
	require.NoError(t, err, "topo.New(%s)", role)
	t.Cleanup(func() { n.Close() })
	return n
}

// route adds a route to dst (a CIDR, or "default" with gw's family) via
// gw in n, through netlink (an `ip` process costs a second under TCG).
func route(t testing.TB, n *topo.NS, dst, gw string) {
	t.Helper()
	r := &netlink.Route{Gw: net.ParseIP(gw)}
	if dst != "default" {
		_, d, err := net.ParseCIDR(dst)
		require.NoError(t, err)
		r.Dst = d
	}
	require.NoError(t, n.Do(func() error { return netlink.RouteAdd(r) }), "route %s via %s in %s", dst, gw, n.Name)
}

func sysctl(t testing.TB, n *topo.NS, kv map[string]string) {
	t.Helper()
	require.NoError(t, n.Do(func() error {
		for k, v := range kv {
			p := filepath.Join("/proc/sys", strings.ReplaceAll(k, ".", "/"))
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				return err
			}
		}
		return nil
	}), "sysctl in %s", n.Name)
}

// txChecksumOff turns off dev's transmit checksum offload (ethtool -K dev
// tx off, through SIOCETHTOOL): a veth otherwise hands on TCP and UDP
// with the checksum left to complete (CHECKSUM_PARTIAL), which a frame
// that goes through XDP_TX loses, and the backend drops the segment.
func txChecksumOff(t testing.TB, n *topo.NS, dev string) {
	t.Helper()
	require.NoError(t, n.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		const ethtoolSTXCSUM = 0x17
		v := struct{ cmd, data uint32 }{cmd: ethtoolSTXCSUM}
		var req struct {
			name [unix.IFNAMSIZ]byte
			data unsafe.Pointer
			_    [16]byte
		}
		copy(req.name[:], dev)
		req.data = unsafe.Pointer(&v)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
		runtime.KeepAlive(&v)
		if errno != 0 {
			return fmt.Errorf("ETHTOOL_STXCSUM %s: %w", dev, errno)
		}
		return nil
	}), "tx checksum off on %s", dev)
}

// passProgram returns XDP_PASS: a veth receives XDP_TX frames from its
// peer only with an XDP program of its own (before 5.13, or GRO).
func passProgram(t testing.TB) *ebpf.Program {
	t.Helper()
	require.NoError(t, rlimit.RemoveMemlock(), "memlock (before 5.11)")
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	require.NoError(t, err, "load XDP_PASS program")
	t.Cleanup(func() { p.Close() })
	return p
}

func attach(t testing.TB, n *topo.NS, dev string, p *ebpf.Program) {
	t.Helper()
	idx, err := n.LinkIndex(dev)
	require.NoError(t, err)
	var l link.Link
	require.NoError(t, n.Do(func() error {
		l, err = link.AttachXDP(link.XDPOptions{Program: p, Interface: idx})
		return err
	}), "attach XDP to %s in %s", dev, n.Name)
	t.Cleanup(func() { l.Close() })
}

// serve answers every TCP line and UDP datagram to the VIPs with name.
func serve(t testing.TB, n *topo.NS, name string) {
	t.Helper()
	require.NoError(t, n.Do(func() error {
		if err := serveTCP(t, tcpPort, name); err != nil {
			return err
		}
		// Bound to the VIP, so the answer leaves from it.
		for _, vip := range []string{nsVIP4, nsVIP6} {
			pc, err := net.ListenPacket("udp", net.JoinHostPort(vip, fmt.Sprint(udpPort)))
			if err != nil {
				return err
			}
			t.Cleanup(func() { pc.Close() })
			go func() {
				buf := make([]byte, 1500)
				for {
					_, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					pc.WriteTo([]byte(name), from)
				}
			}()
		}
		return nil
	}), "serve in %s", n.Name)
}

// decapsulate gives backend n tunnel devices that take the balancer's
// IPIP and IP6IP6 in (local: its address, remote: any), as the VM
// matrix's kernels have; a kernel built without them (no ipip module)
// gets xdplb_decap on b0 instead, and the test says so.
func decapsulate(t testing.TB, n *topo.NS, a4, a6 string) {
	t.Helper()
	err := n.Do(func() error {
		t4 := &netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "xlb4"}, Local: net.ParseIP(a4)}
		if err := netlink.LinkAdd(t4); err != nil {
			return err
		}
		t6 := &netlink.Ip6tnl{LinkAttrs: netlink.LinkAttrs{Name: "xlb6"}, Local: net.ParseIP(a6), Proto: unix.IPPROTO_IPV6}
		if err := netlink.LinkAdd(t6); err != nil {
			return fmt.Errorf("add ip6tnl: %w", err)
		}
		for _, l := range []netlink.Link{t4, t6} {
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Logf("%s: no ipip in this kernel: xdplb_decap on b0 decapsulates", n.Name)
		p, err := xdplb.LoadDecap()
		require.NoError(t, err, "LoadDecap()")
		t.Cleanup(func() { p.Close() })
		attach(t, n, "b0", p)
		return
	}
	require.NoError(t, err, "tunnel devices in %s", n.Name)
	sysctl(t, n, map[string]string{"net.ipv4.conf.xlb4.rp_filter": "0"})
}

// serveTCP answers every line on port with name (in the caller's
// namespace).
func serveTCP(t testing.TB, port int, name string) error {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := c.Write([]byte(name + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return nil
}

type flow struct {
	name string
	c    net.Conn
	udp  bool
}

// ask sends one request on f and returns the backend that answered.
func (f flow) ask() (string, error) {
	f.c.SetDeadline(time.Now().Add(nsWait))
	if f.udp {
		if _, err := f.c.Write([]byte("who")); err != nil {
			return "", err
		}
		buf := make([]byte, 64)
		n, err := f.c.Read(buf)
		return string(buf[:n]), err
	}
	if _, err := f.c.Write([]byte("who\n")); err != nil {
		return "", err
	}
	s, err := bufio.NewReader(f.c).ReadString('\n')
	return strings.TrimSpace(s), err
}

func dial(t testing.TB, client *topo.NS, network, addr string) flow {
	t.Helper()
	var c net.Conn
	require.NoError(t, client.Do(func() (err error) {
		c, err = net.DialTimeout(network, addr, nsWait)
		return err
	}), "dial %s %s", network, addr)
	t.Cleanup(func() { c.Close() })
	return flow{name: network + " " + addr, c: c, udp: strings.HasPrefix(network, "udp")}
}

// lab is the topology above with the balancer loaded, not yet attached.
type lab struct {
	client, router, edge *topo.NS
	backs                []*topo.NS
	names                []string
	b                    *xdplb.Balancer
	cfg                  func(drain bool) xdplb.Config
}

func newLab(t testing.TB) *lab {
	t.Helper()
	testutil.Root(t)
	client, router, edge := ns(t, "xc"), ns(t, "xr"), ns(t, "xe")
	backs := []*topo.NS{ns(t, "xb1"), ns(t, "xb2")}
	names := []string{"b1", "b2"}

	require.NoError(t, topo.Veth(client, "c0", router, "rc"))
	require.NoError(t, topo.Veth(edge, "e0", router, "re"))
	for i, b := range backs {
		require.NoError(t, topo.Veth(b, "b0", router, fmt.Sprintf("r%d", i+1)))
	}
	addr := func(n *topo.NS, dev string, cidrs ...string) {
		for _, c := range cidrs {
			require.NoError(t, n.AddAddr(dev, c))
		}
	}
	fwd := map[string]string{"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1"}
	sysctl(t, router, fwd)
	addr(client, "c0", "198.18.10.2/24", "2001:db8:10::2/64")
	addr(router, "rc", "198.18.10.1/24", "2001:db8:10::1/64")
	addr(router, "re", "198.18.20.1/24", "2001:db8:20::1/64")
	addr(edge, "e0", "198.18.20.2/24", "2001:db8:20::2/64")
	require.NoError(t, client.Do(func() error {
		l, err := netlink.LinkByName("c0")
		if err != nil {
			return err
		}
		return netlink.LinkSetMTU(l, clientMT)
	}), "client MTU")
	route(t, client, "default", "198.18.10.1")
	route(t, client, "default", "2001:db8:10::1")
	txChecksumOff(t, client, "c0")
	route(t, router, nsVIP4+"/32", "198.18.20.2")
	route(t, router, nsVIP6+"/128", "2001:db8:20::2")

	var bcfg []xdplb.Backend
	var bcfg6 []xdplb.Backend
	for i, b := range backs {
		a4, a6 := fmt.Sprintf("198.18.3%d.2", i+1), fmt.Sprintf("2001:db8:3%d::2", i+1)
		r := fmt.Sprintf("r%d", i+1)
		addr(router, r, fmt.Sprintf("198.18.3%d.1/24", i+1), fmt.Sprintf("2001:db8:3%d::1/64", i+1))
		addr(b, "b0", a4+"/24", a6+"/64")
		route(t, b, "default", fmt.Sprintf("198.18.3%d.1", i+1))
		route(t, b, "default", fmt.Sprintf("2001:db8:3%d::1", i+1))
		decapsulate(t, b, a4, a6)
		addr(b, "lo", nsVIP4+"/32", nsVIP6+"/128")
		// The inner source is the client, not reachable through xlb4.
		sysctl(t, b, map[string]string{"net.ipv4.conf.all.rp_filter": "0", "net.ipv4.conf.b0.rp_filter": "0"})
		serve(t, b, names[i])
		bcfg = append(bcfg, xdplb.Backend{Addr: netip.MustParseAddr(a4)})
		bcfg6 = append(bcfg6, xdplb.Backend{Addr: netip.MustParseAddr(a6)})
	}

	next, err := router.HardwareAddr("re")
	require.NoError(t, err)
	attach(t, router, "re", passProgram(t))
	b, err := xdplb.Load()
	require.NoError(t, err, "xdplb.Load()")
	t.Cleanup(func() { b.Close() })
	cfg := func(drain bool) xdplb.Config {
		v4, v6 := append([]xdplb.Backend(nil), bcfg...), append([]xdplb.Backend(nil), bcfg6...)
		v4[0].Drain, v6[0].Drain = drain, drain
		return xdplb.Config{NextHop: xdplb.MAC(next), MTU: 1500,
			Source4: netip.MustParseAddr("198.18.20.2"), Source6: netip.MustParseAddr("2001:db8:20::2"),
			VIPs: []xdplb.VIP{
				{Addr: netip.MustParseAddr(nsVIP4), Port: tcpPort, Proto: "tcp", Backends: v4},
				{Addr: netip.MustParseAddr(nsVIP4), Port: udpPort, Proto: "udp", Backends: v4},
				{Addr: netip.MustParseAddr(nsVIP6), Port: tcpPort, Proto: "tcp", Backends: v6},
				{Addr: netip.MustParseAddr(nsVIP6), Port: udpPort, Proto: "udp", Backends: v6},
			}}
	}
	return &lab{client: client, router: router, edge: edge, backs: backs, names: names, b: b, cfg: cfg}
}

func TestNamespacesDSR(t *testing.T) {
	l := newLab(t)
	client, b, cfg := l.client, l.b, l.cfg
	edge := l.edge
	require.NoError(t, b.Apply(cfg(false)), "Apply()")
	attach(t, edge, "e0", b.Program())

	flowsPer := nsFlows
	if testing.Short() {
		flowsPer = nsFlows / 2 // TCG: every flow costs
	}
	kinds := []struct{ network, addr string }{
		{"tcp", net.JoinHostPort(nsVIP4, fmt.Sprint(tcpPort))},
		{"udp", net.JoinHostPort(nsVIP4, fmt.Sprint(udpPort))},
		{"tcp", net.JoinHostPort(nsVIP6, fmt.Sprint(tcpPort))},
		{"udp", net.JoinHostPort(nsVIP6, fmt.Sprint(udpPort))},
	}
	// Established flows, spread over both backends.
	first := map[*flow]string{}
	var flows []*flow
	seen := map[string]int{}
	for _, k := range kinds {
		for i := 0; i < flowsPer; i++ {
			f := dial(t, client, k.network, k.addr)
			who, err := f.ask()
			require.NoError(t, err, "%s: flow %d unanswered", f.name, i)
			first[&f] = who
			flows = append(flows, &f)
			seen[who]++
		}
	}
	require.Len(t, seen, 2, "flows over both backends: %v", seen)
	st, err := b.Stats()
	require.NoError(t, err)
	require.Positive(t, st.Reasons["tx"], "balanced packets")

	// Drain b1 mid-flow: established flows stay where they are, new ones
	// all go to b2.
	require.NoError(t, b.Apply(cfg(true)), "drain b1")
	for _, f := range flows {
		who, err := f.ask()
		require.NoError(t, err, "%s: established flow unanswered after the drain", f.name)
		assert.Equal(t, first[f], who, "%s: established flow moved", f.name)
	}
	for _, k := range kinds {
		for i := 0; i < flowsPer/2; i++ {
			f := dial(t, client, k.network, k.addr)
			who, err := f.ask()
			require.NoError(t, err, "%s: new flow %d unanswered", f.name, i)
			assert.Equal(t, "b2", who, "%s: new flow %d", f.name, i)
		}
	}
}
