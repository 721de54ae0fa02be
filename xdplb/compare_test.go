package xdplb_test

// The comparison of issue 30's study: xdplb, nftables DNAT and IPVS
// (tunnel mode, ipvsadm) on the same edge, the same three backends and the
// same client, one after the other in one run: a request's latency
// (connect, one line and its answer, close), the machine's CPU per
// request, and the share of flows that move when a backend goes. Not in
// `make test` (it takes a minute, and its figures are a study's):
//
//	go test -count=1 -run TestCompareBalancers -v ./xdplb -xdplb.study
//
// and in a VM of the matrix, where IPVS exists (the development kernel has
// no CONFIG_IP_VS; under TCG only the ratios within one run mean anything):
//
//	CGO_ENABLED=0 go test -c -o /tmp/xdplb.test ./xdplb
//	go build -o /tmp/vmexec ./vmtest/cmd/vmexec
//	cd xdplb && /tmp/vmexec -kernel 6.1 -tools ip,nft,ipvsadm \
//	  -modules veth,ipip,ip6_tunnel,nf_tables,nft_chain_nat,nft_nat,nft_hash,nf_conntrack,nf_conntrack_netlink,ip_vs,ip_vs_mh,ip_vs_sh \
//	  /tmp/xdplb.test -test.v -test.run TestCompareBalancers -xdplb.study
//
// The modules and tools are named on the command line, not added to the
// matrix's defaults: nothing of `make vmtest` needs them.

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/lb/maglev"
	"github.com/xdpshield/xdpshield/xdplb"
)

var studyFlag = flag.Bool("xdplb.study", false, "run TestCompareBalancers (xdplb, nftables DNAT and IPVS side by side: a study, not a test of make test)")

const (
	cmpBackends = 3
	cmpFlowPort = 41000 // client source ports of the moved-flows probe: cmpFlowPort+i
)

// cmpLab is newLab's topology with cmpBackends backends and TCP only, the
// edge able to forward (nftables DNAT) and the router able to send a
// backend's own-address answers back through the edge (DNAT needs its
// answers to pass the box that translated; DSR answers from the VIP do
// not).
type cmpLab struct {
	client, router, edge *topo.NS
	backs                []*topo.NS
	addrs                []netip.Addr
	next                 net.HardwareAddr
}

func newCmpLab(t *testing.T) *cmpLab {
	testutil.Root(t)
	l := &cmpLab{client: ns(t, "xcc"), router: ns(t, "xcr"), edge: ns(t, "xce")}
	require.NoError(t, topo.Veth(l.client, "c0", l.router, "rc"))
	require.NoError(t, topo.Veth(l.edge, "e0", l.router, "re"))
	add := func(n *topo.NS, dev, cidr string) { require.NoError(t, n.AddAddr(dev, cidr)) }
	fwd := map[string]string{"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.send_redirects": "0", "net.ipv4.conf.all.rp_filter": "0"}
	sysctl(t, l.router, fwd)
	sysctl(t, l.edge, fwd)
	sysctl(t, l.edge, map[string]string{"net.ipv4.conf.e0.send_redirects": "0", "net.ipv4.conf.e0.rp_filter": "0"})
	// Ephemeral ports above the moved-flows probe's fixed ones: a
	// request's port in TIME_WAIT would refuse the probe's bind.
	sysctl(t, l.client, map[string]string{"net.ipv4.ip_local_port_range": "50000 60999"})
	add(l.client, "c0", "198.18.10.2/24")
	add(l.router, "rc", "198.18.10.1/24")
	add(l.router, "re", "198.18.20.1/24")
	add(l.edge, "e0", "198.18.20.2/24")
	route(t, l.client, "default", "198.18.10.1")
	route(t, l.edge, "default", "198.18.20.1")
	require.NoError(t, l.client.Do(func() error {
		c0, err := netlink.LinkByName("c0")
		if err != nil {
			return err
		}
		return netlink.LinkSetMTU(c0, clientMT)
	}))
	txChecksumOff(t, l.client, "c0")
	route(t, l.router, nsVIP4+"/32", "198.18.20.2")
	for i := range cmpBackends {
		b := ns(t, fmt.Sprintf("xcb%d", i+1))
		l.backs = append(l.backs, b)
		r := fmt.Sprintf("r%d", i+1)
		require.NoError(t, topo.Veth(b, "b0", l.router, r))
		a4 := fmt.Sprintf("198.18.3%d.2", i+1)
		add(l.router, r, fmt.Sprintf("198.18.3%d.1/24", i+1))
		add(b, "b0", a4+"/24")
		add(b, "b0", fmt.Sprintf("2001:db8:3%d::2/64", i+1)) // decapsulate's ip6tnl wants one
		route(t, b, "default", fmt.Sprintf("198.18.3%d.1", i+1))
		decapsulate(t, b, a4, fmt.Sprintf("2001:db8:3%d::2", i+1))
		add(b, "lo", nsVIP4+"/32")
		sysctl(t, b, map[string]string{"net.ipv4.conf.all.rp_filter": "0", "net.ipv4.conf.b0.rp_filter": "0"})
		txChecksumOff(t, b, "b0")
		name := fmt.Sprintf("b%d", i+1)
		require.NoError(t, b.Do(func() error { return serveTCP(t, tcpPort, name) }))
		l.addrs = append(l.addrs, netip.MustParseAddr(a4))
	}
	var err error
	l.next, err = l.router.HardwareAddr("re")
	require.NoError(t, err)
	attach(t, l.router, "re", passProgram(t))
	return l
}

// viaEdge sends what backends answer from their own address to the client
// through the edge (on: before the DNAT row; off: after it).
func (l *cmpLab) viaEdge(t *testing.T, on bool) {
	require.NoError(t, l.router.Do(func() error {
		for i := range cmpBackends {
			_, src, _ := net.ParseCIDR(fmt.Sprintf("198.18.3%d.0/24", i+1))
			_, dst, _ := net.ParseCIDR("198.18.10.0/24")
			r := netlink.NewRule()
			r.Src, r.Dst, r.Table, r.Priority = src, dst, 100, 100+i
			var err error
			if on {
				err = netlink.RuleAdd(r)
			} else {
				err = netlink.RuleDel(r)
			}
			if err != nil {
				return fmt.Errorf("rule %v: %w", r, err)
			}
		}
		if !on {
			return nil
		}
		_, dst, _ := net.ParseCIDR("198.18.10.0/24")
		return netlink.RouteAdd(&netlink.Route{Dst: dst, Gw: net.ParseIP("198.18.20.2"), Table: 100})
	}), "policy routing through the edge")
}

// cmpRow is one balancer's figures.
type cmpRow struct {
	name             string
	skipped          string
	p50, p99         time.Duration
	cpuUs            float64 // system+softirq+irq CPU µs per request, the whole machine
	moved, onRemoved int     // flows that changed backend; of them, on the removed one
	flows            int
}

// cpuTime is the machine's system, irq and softirq time (/proc/stat).
func cpuTime(t *testing.T) time.Duration {
	b, err := os.ReadFile("/proc/stat")
	require.NoError(t, err)
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var j int64
	for _, i := range []int{3, 6, 7} { // system, irq, softirq
		v, err := strconv.ParseInt(f[i], 10, 64)
		require.NoError(t, err)
		j += v
	}
	return time.Duration(j) * 10 * time.Millisecond // USER_HZ 100
}

// request connects to the VIP (from port sport when not 0), sends a line,
// reads the answer (the backend's name) and closes (with a reset when
// sport is fixed, so the same tuple can come again at once).
func (l *cmpLab) request(sport int) (string, error) {
	var who string
	err := l.client.Do(func() error {
		d := net.Dialer{Timeout: nsWait}
		if sport != 0 {
			d.LocalAddr = &net.TCPAddr{Port: sport}
		}
		c, err := d.Dial("tcp", net.JoinHostPort(nsVIP4, fmt.Sprint(tcpPort)))
		if err != nil {
			return err
		}
		defer c.Close()
		if sport != 0 {
			c.(*net.TCPConn).SetLinger(0)
		}
		c.SetDeadline(time.Now().Add(nsWait))
		if _, err := c.Write([]byte("who\n")); err != nil {
			return err
		}
		who, err = bufio.NewReader(c).ReadString('\n')
		who = strings.TrimSpace(who)
		return err
	})
	return who, err
}

// measure fills row's latency and CPU from n requests.
func (l *cmpLab) measure(t *testing.T, row *cmpRow, n int) {
	for range 10 { // warm up (ARP, first flows)
		_, err := l.request(0)
		require.NoError(t, err, "%s: warm-up request", row.name)
	}
	lat := make([]time.Duration, 0, n)
	c0 := cpuTime(t)
	for i := range n {
		start := time.Now()
		_, err := l.request(0)
		require.NoError(t, err, "%s: request %d", row.name, i)
		lat = append(lat, time.Since(start))
	}
	row.cpuUs = float64((cpuTime(t) - c0).Microseconds()) / float64(n)
	slices.Sort(lat)
	row.p50, row.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
}

// flows asks n flows with fixed source ports which backend serves them.
func (l *cmpLab) flows(t *testing.T, name string, n int) []string {
	out := make([]string, n)
	for i := range n {
		who, err := l.request(cmpFlowPort + i)
		require.NoError(t, err, "%s: flow %d", name, i)
		out[i] = who
	}
	return out
}

func movedFlows(row *cmpRow, before, after []string, removed string) {
	row.flows = len(before)
	for i := range before {
		if before[i] != after[i] {
			row.moved++
			if before[i] == removed {
				row.onRemoved++
			}
		}
	}
}

// runIn runs cmd in n and fails the test on an error.
func runIn(t *testing.T, n *topo.NS, name string, args ...string) {
	out, err := n.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
}

func TestCompareBalancers(t *testing.T) {
	if !*studyFlag {
		t.Skip("a study: -xdplb.study runs it")
	}
	l := newCmpLab(t)
	reqs, nflows := 300, 300
	if testing.Short() {
		reqs, nflows = 60, 90
	}
	removed := fmt.Sprintf("b%d", cmpBackends)
	var rows []*cmpRow

	// xdplb: Maglev, encapsulation, DSR.
	{
		row := &cmpRow{name: "xdplb (XDP, IPIP, DSR)"}
		cfg := func(n int) xdplb.Config {
			var bs []xdplb.Backend
			for _, a := range l.addrs[:n] {
				bs = append(bs, xdplb.Backend{Addr: a})
			}
			return xdplb.Config{NextHop: xdplb.MAC(l.next), MTU: 1500, Source4: netip.MustParseAddr("198.18.20.2"),
				VIPs: []xdplb.VIP{{Addr: netip.MustParseAddr(nsVIP4), Port: tcpPort, Proto: "tcp", Backends: bs}}}
		}
		up := func(n int) (*xdplb.Balancer, link.Link) {
			b, err := xdplb.Load()
			require.NoError(t, err)
			require.NoError(t, b.Apply(cfg(n)))
			idx, err := l.edge.LinkIndex("e0")
			require.NoError(t, err)
			var lk link.Link
			require.NoError(t, l.edge.Do(func() (err error) {
				lk, err = link.AttachXDP(link.XDPOptions{Program: b.Program(), Interface: idx})
				return err
			}))
			return b, lk
		}
		b, lk := up(cmpBackends)
		l.measure(t, row, reqs)
		before := l.flows(t, row.name, nflows)
		lk.Close()
		b.Close()
		// A new balancer: an empty connection table, as after a restart,
		// so the table's choice is what is seen.
		b, lk = up(cmpBackends - 1)
		after := l.flows(t, row.name, nflows)
		lk.Close()
		b.Close()
		movedFlows(row, before, after, removed)
		rows = append(rows, row)
		t.Log(cmpTable([]*cmpRow{row}))
		// The Go twin of the program's choice (FlowHash, maglev.Table)
		// predicts every flow's backend, before and after.
		var s3 []string
		for _, a := range l.addrs {
			s3 = append(s3, a.String())
		}
		t3 := maglev.Table(s3, nil, xdplb.RingSize)
		t2 := maglev.Table(s3[:cmpBackends-1], nil, xdplb.RingSize)
		wrong := 0
		for i := range nflows {
			slot := xdplb.FlowHash(netip.MustParseAddr("198.18.10.2"), netip.MustParseAddr(nsVIP4), uint16(cmpFlowPort+i), tcpPort, 6) % uint32(xdplb.RingSize)
			if fmt.Sprintf("b%d", t3[slot]+1) != before[i] || fmt.Sprintf("b%d", t2[slot]+1) != after[i] {
				wrong++
			}
		}
		assert.Zero(t, wrong, "flows whose backend the Go twin (FlowHash, MaglevTable) did not predict")
	}

	// nftables DNAT: jhash of the client's address and port, modulo n, with
	// a fixed seed (nft draws one per load otherwise: every flow could move).
	{
		row := &cmpRow{name: "nftables DNAT (jhash mod n)"}
		if _, err := exec.LookPath("nft"); err != nil {
			row.skipped = "nft not installed"
		} else {
			l.viaEdge(t, true)
			rules := func(n int) string {
				var m []string
				for i, a := range l.addrs[:n] {
					m = append(m, fmt.Sprintf("%d : %s", i, a))
				}
				return fmt.Sprintf("flush ruleset\ntable ip xlbstudy {\n chain pre {\n  type nat hook prerouting priority dstnat; policy accept;\n  ip daddr %s tcp dport %d dnat to jhash ip saddr . tcp sport mod %d seed 0x5eed map { %s }\n }\n}\n",
					nsVIP4, tcpPort, n, strings.Join(m, ", "))
			}
			apply := func(n int) {
				cmd := l.edge.Command("nft", "-f", "-")
				cmd.Stdin = strings.NewReader(rules(n))
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "nft -f: %s", out)
				// Not needed for the probe (a SYN on a tuple its client
				// reset makes conntrack start the flow anew, NAT choice
				// included), and refused without nf_conntrack_netlink.
				if err := l.edge.Do(func() error { return netlink.ConntrackTableFlush(netlink.ConntrackTable) }); err != nil {
					t.Logf("flush conntrack: %v (not needed: the probe's flows were reset)", err)
				}
			}
			apply(cmpBackends)
			l.measure(t, row, reqs)
			before := l.flows(t, row.name, nflows)
			apply(cmpBackends - 1)
			after := l.flows(t, row.name, nflows)
			movedFlows(row, before, after, removed)
			runIn(t, l.edge, "nft", "flush", "ruleset")
			l.viaEdge(t, false)
		}
		rows = append(rows, row)
		t.Log(cmpTable([]*cmpRow{row}))
	}

	// IPVS, tunnel mode, each scheduler that keeps a flow's choice
	// stable: mh (Maglev hashing) and sh (source hashing), both with
	// their -port flag: without it they hash the client's address alone,
	// and the probe's one client puts every flow on one backend (the
	// first VM run: mh moved 0 of 300, sh 300 of 300).
	for _, sched := range []string{"mh", "sh"} {
		row := &cmpRow{name: "IPVS tunnel, " + sched + " (" + sched + "-port)"}
		rows = append(rows, row)
		if _, err := exec.LookPath("ipvsadm"); err != nil {
			row.skipped = "ipvsadm not installed (ci/deps.sh)"
			continue
		}
		if out, err := l.edge.Command("ipvsadm", "-Ln").CombinedOutput(); err != nil {
			row.skipped = fmt.Sprintf("no IPVS in this kernel (CONFIG_IP_VS): ipvsadm -Ln: %s", strings.TrimSpace(string(out)))
			continue
		}
		svc := net.JoinHostPort(nsVIP4, fmt.Sprint(tcpPort))
		require.NoError(t, l.edge.AddAddr("lo", nsVIP4+"/32"))
		sysctl(t, l.edge, map[string]string{"net.ipv4.vs.conn_reuse_mode": "1", "net.ipv4.vs.expire_nodest_conn": "1"})
		setup := func(n int) {
			runIn(t, l.edge, "ipvsadm", "-C")
			runIn(t, l.edge, "ipvsadm", "-A", "-t", svc, "-s", sched, "-b", sched+"-port")
			for _, a := range l.addrs[:n] {
				runIn(t, l.edge, "ipvsadm", "-a", "-t", svc, "-r", net.JoinHostPort(a.String(), fmt.Sprint(tcpPort)), "-i")
			}
		}
		setup(cmpBackends)
		l.measure(t, row, reqs)
		before := l.flows(t, row.name, nflows)
		setup(cmpBackends - 1)
		after := l.flows(t, row.name, nflows)
		movedFlows(row, before, after, removed)
		t.Log(cmpTable([]*cmpRow{row}))
		runIn(t, l.edge, "ipvsadm", "-C")
		require.NoError(t, l.edge.Do(func() error {
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				return err
			}
			a, _ := netlink.ParseAddr(nsVIP4 + "/32")
			return netlink.AddrDel(lo, a)
		}))
	}

	t.Log(cmpTable(rows))
	for _, r := range rows {
		if r.skipped != "" || r.flows == 0 {
			continue
		}
		// Every flow on the removed backend must move; Maglev-like
		// tables (xdplb, IPVS mh) move little more.
		assert.Positive(t, r.onRemoved, "%s: no flow was on the removed backend", r.name)
		if strings.HasPrefix(r.name, "xdplb") || strings.HasPrefix(r.name, "IPVS tunnel, mh") {
			assert.Less(t, float64(r.moved), 1.6*float64(r.flows)/cmpBackends, "%s: moved %d of %d flows, want about 1/%d", r.name, r.moved, r.flows, cmpBackends)
		}
	}
}

// cmpTable is the comparison as a markdown table.
func cmpTable(rows []*cmpRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| balancer | connect+request p50 µs | p99 µs | CPU µs/request (machine: sys+irq+softirq) | flows moved when b%d of %d goes | of them on b%d |\n|---|---:|---:|---:|---:|---:|\n", cmpBackends, cmpBackends, cmpBackends)
	for _, r := range rows {
		if r.skipped != "" {
			fmt.Fprintf(&b, "| %s | not measured: %s | | | | |\n", r.name, strings.ReplaceAll(r.skipped, "\n", " "))
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %d/%d (%.2f) | %d |\n", r.name, r.p50.Microseconds(), r.p99.Microseconds(), r.cpuUs, r.moved, r.flows, float64(r.moved)/float64(r.flows), r.onRemoved)
	}
	return b.String()
}
