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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	nsFlows  = 8 // per kind; all 32 on one backend by chance: 2^-31
	nsWait   = 5 * time.Second
	clientMT = 1400 // room for the outer header within the veths' 1500
)

func ns(t *testing.T, role string) *topo.NS {
	t.Helper()
	n, err := topo.New(role)
	require.NoError(t, err, "topo.New(%s)", role)
	t.Cleanup(func() { n.Close() })
	return n
}

func ip(t *testing.T, n *topo.NS, args ...string) {
	t.Helper()
	out, err := n.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s in %s: %s", strings.Join(args, " "), n.Name, out)
}

func sysctl(t *testing.T, n *topo.NS, kv map[string]string) {
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
func txChecksumOff(t *testing.T, n *topo.NS, dev string) {
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
func passProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	require.NoError(t, err, "load XDP_PASS program")
	t.Cleanup(func() { p.Close() })
	return p
}

func attach(t *testing.T, n *topo.NS, dev string, p *ebpf.Program) {
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
func serve(t *testing.T, n *topo.NS, name string) {
	t.Helper()
	require.NoError(t, n.Do(func() error {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", tcpPort))
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
func decapsulate(t *testing.T, n *topo.NS, a4, a6 string) {
	t.Helper()
	out, err := n.Command("ip", "link", "add", "xlb4", "type", "ipip", "local", a4, "remote", "any").CombinedOutput()
	if err != nil && strings.Contains(string(out), "Unknown device type") {
		t.Logf("%s: no ipip in this kernel: xdplb_decap on b0 decapsulates", n.Name)
		p, err := xdplb.LoadDecap()
		require.NoError(t, err, "LoadDecap()")
		t.Cleanup(func() { p.Close() })
		attach(t, n, "b0", p)
		return
	}
	require.NoError(t, err, "ip link add xlb4 in %s: %s", n.Name, out)
	ip(t, n, "-6", "link", "add", "xlb6", "type", "ip6tnl", "mode", "ip6ip6", "local", a6, "remote", "any")
	ip(t, n, "link", "set", "xlb4", "up")
	ip(t, n, "link", "set", "xlb6", "up")
	sysctl(t, n, map[string]string{"net.ipv4.conf.xlb4.rp_filter": "0"})
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

func dial(t *testing.T, client *topo.NS, network, addr string) flow {
	t.Helper()
	var c net.Conn
	require.NoError(t, client.Do(func() (err error) {
		c, err = net.DialTimeout(network, addr, nsWait)
		return err
	}), "dial %s %s", network, addr)
	t.Cleanup(func() { c.Close() })
	return flow{name: network + " " + addr, c: c, udp: strings.HasPrefix(network, "udp")}
}

func TestNamespacesDSR(t *testing.T) {
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
	ip(t, client, "link", "set", "c0", "mtu", fmt.Sprint(clientMT))
	ip(t, client, "route", "add", "default", "via", "198.18.10.1")
	ip(t, client, "-6", "route", "add", "default", "via", "2001:db8:10::1")
	txChecksumOff(t, client, "c0")
	ip(t, router, "route", "add", nsVIP4+"/32", "via", "198.18.20.2")
	ip(t, router, "-6", "route", "add", nsVIP6+"/128", "via", "2001:db8:20::2")

	var bcfg []xdplb.Backend
	var bcfg6 []xdplb.Backend
	for i, b := range backs {
		a4, a6 := fmt.Sprintf("198.18.3%d.2", i+1), fmt.Sprintf("2001:db8:3%d::2", i+1)
		r := fmt.Sprintf("r%d", i+1)
		addr(router, r, fmt.Sprintf("198.18.3%d.1/24", i+1), fmt.Sprintf("2001:db8:3%d::1/64", i+1))
		addr(b, "b0", a4+"/24", a6+"/64")
		ip(t, b, "route", "add", "default", "via", fmt.Sprintf("198.18.3%d.1", i+1))
		ip(t, b, "-6", "route", "add", "default", "via", fmt.Sprintf("2001:db8:3%d::1", i+1))
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
	require.NoError(t, b.Apply(cfg(false)), "Apply()")
	attach(t, edge, "e0", b.Program())

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
		for i := 0; i < nsFlows; i++ {
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
		for i := 0; i < nsFlows/2; i++ {
			f := dial(t, client, k.network, k.addr)
			who, err := f.ask()
			require.NoError(t, err, "%s: new flow %d unanswered", f.name, i)
			assert.Equal(t, "b2", who, "%s: new flow %d", f.name, i)
		}
	}
}
