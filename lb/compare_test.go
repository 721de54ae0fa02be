package lb

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

var (
	compare         = flag.Bool("lb.compare", false, "run TestCompare: the socket balancer against nftables DNAT and a user-space proxy")
	compareConnects = flag.Int("lb.connects", 3000, "TestCompare: new connections per method")
	compareRequests = flag.Int("lb.requests", 20000, "TestCompare: keep-alive requests per method (over -lb.conns connections)")
	compareConns    = flag.Int("lb.conns", 4, "TestCompare: concurrent keep-alive connections")
	compareRounds   = flag.Int("lb.rounds", 20, "TestCompare: interleaved rounds the work is split into")
)

// The comparison's addresses: each method gets its own front address, so
// they coexist and their rounds can interleave.
var (
	nftVIP   = netip.MustParseAddrPort("198.18.0.101:80")
	proxyVIP = netip.MustParseAddrPort("198.18.0.1:8000") // the proxy listens in the client namespace
)

type method struct {
	name           string
	front, ufront  netip.AddrPort // TCP and UDP
	setup, cleanup func(t *testing.T)
}

type sample struct {
	connect, first []time.Duration
	requests       int
	elapsed        time.Duration
	rates          []float64 // keep-alive requests/s, per round
	ufirst         []time.Duration
	urates         []float64 // UDP request/response per s, per round
}

// TestCompare measures, in one run and at the same offered load, connection
// setup (connect() and the first reply), keep-alive request throughput and
// UDP request/response (a new socket's first answer, and answers per
// second on one socket) through: the socket balancer; per-packet DNAT with
// nftables, as kube-proxy's nftables mode builds it; a user-space L4 proxy
// in Go; and, as the references, a backend dialled directly with the
// balancer detached and with it attached (what it costs connects that are
// not to a service). Each method runs alone: nftables' table (and so
// conntrack, which its NAT hook turns on in the namespace) exists only
// during its rounds; the proxy is a process of its own, in a cgroup the
// balancer is not attached to; the balancer is attached only during its
// rounds and the second reference's. Rounds of the methods interleave, in a
// new random order each round, so drift on a shared machine hits them
// alike.
//
//	go test -run TestCompare -v ./lb -args -lb.compare
func TestCompare(t *testing.T) {
	if !*compare {
		t.Skip("a measurement, not a check: run with -args -lb.compare")
	}
	testutil.Root(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.SkipOrFail(t, "nft not installed (Debian nftables; ci/deps.sh installs it)")
	}
	const n = 3
	e := newEnv(t, n)
	bes := backendAddrs(false, n)
	k := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP}
	uk := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
	require.NoError(t, e.lb.AddServices([]lbconf.Service{{ServiceKey: k, Mode: lbconf.Random, Backends: backends(bes...)},
		{ServiceKey: uk, Mode: lbconf.Random, Backends: backends(bes...)}}))
	stop, err := e.proxyProcess(proxyVIP, bes)
	require.NoError(t, err)
	defer stop()

	attached := true
	attach := func(on bool) func(t *testing.T) {
		return func(t *testing.T) {
			if on == attached {
				return
			}
			var err error
			if on {
				err = e.lb.Attach(e.cgroup)
			} else {
				err = e.lb.Detach()
			}
			require.NoError(t, err)
			attached = on
		}
	}
	none := func(*testing.T) {}
	nftUDP := netip.AddrPortFrom(nftVIP.Addr(), 53)
	methods := []method{
		{"direct to a backend (reference)", bes[0], bes[0], attach(false), none},
		{"direct, balancer attached (not a service)", bes[0], bes[0], attach(true), none},
		{"socket balancer (lb)", netip.AddrPortFrom(k.VIP, k.Port), netip.AddrPortFrom(uk.VIP, uk.Port), attach(true), none},
		{"nftables DNAT (conntrack)", nftVIP, nftUDP, func(t *testing.T) {
			attach(false)(t)
			require.NoError(t, e.nftDNAT(nftVIP, nftUDP, bes))
		}, func(t *testing.T) {
			require.NoError(t, e.nftDelete())
		}},
		{"user-space proxy (Go, own process)", proxyVIP, proxyVIP, attach(false), none},
	}
	rounds := *compareRounds
	res := make([]sample, len(methods))
	order := make([]int, len(methods))
	for i := range order {
		order[i] = i
	}
	for r := range rounds {
		// A new order each round: whatever a position costs (the phase
		// after an attach, a collection, a neighbour's burst) is spread
		// over every method.
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			m := methods[i]
			m.setup(t)
			s, err := e.measure(m.front, bes, *compareConnects/rounds, *compareRequests/rounds, *compareConns)
			if err == nil {
				err = e.measureUDP(m.ufront, bes, *compareConnects/rounds, *compareRequests/rounds, &s)
			}
			m.cleanup(t)
			require.NoError(t, err, "%s, round %d", m.name, r)
			res[i].connect = append(res[i].connect, s.connect...)
			res[i].first = append(res[i].first, s.first...)
			res[i].rates = append(res[i].rates, float64(s.requests)/s.elapsed.Seconds())
			res[i].ufirst = append(res[i].ufirst, s.ufirst...)
			res[i].urates = append(res[i].urates, s.urates...)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d new connections, %d keep-alive requests (%d connections), %d new UDP sockets and %d UDP requests per method, %d interleaved rounds\n",
		*compareConnects, *compareRequests, *compareConns, *compareConnects, *compareRequests, rounds)
	fmt.Fprintf(&b, "| method | connect p50 | connect p99 | 1st reply p50 | 1st reply p99 | requests/s | UDP 1st answer p50 | UDP 1st answer p99 | UDP answers/s |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, m := range methods {
		s := res[i]
		slices.Sort(s.rates)
		slices.Sort(s.urates)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.0f | %s | %s | %.0f |\n", m.name,
			us(pct(s.connect, 50)), us(pct(s.connect, 99)), us(pct(s.first, 50)), us(pct(s.first, 99)),
			s.rates[len(s.rates)/2], us(pct(s.ufirst, 50)), us(pct(s.ufirst, 99)), s.urates[len(s.urates)/2])
	}
	t.Log("\n" + b.String())
}

// measureUDP makes news new UDP sockets to front, each timed from socket()
// to its first answer, then sends requests request/answer pairs over one
// connected socket (answers per second into s.urates).
func (e *env) measureUDP(front netip.AddrPort, bes []netip.AddrPort, news, requests int, s *sample) error {
	buf := make([]byte, 256)
	return e.client.Do(func() error {
		for range news {
			t0 := time.Now()
			fd, err := rawUDP(front)
			if err != nil {
				return err
			}
			n, err := rawUDPAsk(fd, buf)
			t1 := time.Now()
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("udp %s: %w", front, err)
			}
			r, err := parseReply(string(buf[:n]))
			if err != nil {
				return err
			}
			if r.kind != "B" || !slices.Contains(bes, r.local) {
				return fmt.Errorf("udp %s reached %s %s, not a backend", front, r.kind, r.local)
			}
			s.ufirst = append(s.ufirst, t1.Sub(t0))
		}
		fd, err := rawUDP(front)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		t0 := time.Now()
		for range requests {
			if _, err := rawUDPAsk(fd, buf); err != nil {
				return fmt.Errorf("udp %s: %w", front, err)
			}
		}
		s.urates = append(s.urates, float64(requests)/time.Since(t0).Seconds())
		return nil
	})
}

func rawUDP(dst netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect udp %s: %w", dst, err)
	}
	return fd, nil
}

// rawUDPAsk sends one request datagram and reads one answer.
func rawUDPAsk(fd int, buf []byte) (int, error) {
	if _, err := unix.Write(fd, []byte("?\n")); err != nil {
		return 0, err
	}
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// measure makes connects new connections to front, one at a time, each
// timed to connect() and to its first reply, then reset; then runs
// requests request/reply pairs over conns keep-alive connections. The
// client uses blocking system calls on locked threads, so Go's poller and
// scheduler add nothing to what is measured but the proxy's own.
func (e *env) measure(front netip.AddrPort, bes []netip.AddrPort, connects, requests, conns int) (sample, error) {
	var s sample
	buf := make([]byte, 256)
	err := e.client.Do(func() error {
		for range connects {
			t0 := time.Now()
			fd, err := rawDial(front)
			if err != nil {
				return err
			}
			t1 := time.Now()
			n, err := rawAsk(fd, buf)
			t2 := time.Now()
			unix.Close(fd)
			if err != nil {
				return err
			}
			r, err := parseReply(string(buf[:n]))
			if err != nil {
				return err
			}
			if r.kind != "B" || !slices.Contains(bes, r.local) {
				return fmt.Errorf("%s reached %s %s, not a backend", front, r.kind, r.local)
			}
			s.connect = append(s.connect, t1.Sub(t0))
			s.first = append(s.first, t2.Sub(t0))
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	per := requests / conns
	errs := make([]error, conns)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	var t0 time.Time
	for i := range conns {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.client.Do(func() error {
				fd, err := rawDial(front)
				ready.Done()
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				<-start
				b := make([]byte, 256)
				for range per {
					if _, err := rawAsk(fd, b); err != nil {
						return err
					}
				}
				return nil
			})
		}()
	}
	ready.Wait()
	t0 = time.Now()
	close(start)
	wg.Wait()
	s.elapsed = time.Since(t0)
	s.requests = per * conns
	return s, errors.Join(errs...)
}

// rawDial is a blocking connect(2) to dst, closing with RST (linger 0) so
// that thousands leave no TIME_WAIT behind.
func rawDial(dst netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect %s: %w", dst, err)
	}
	return fd, nil
}

// rawAsk writes one request line and reads one reply line.
func rawAsk(fd int, buf []byte) (int, error) {
	if _, err := unix.Write(fd, []byte("?\n")); err != nil {
		return 0, err
	}
	n := 0
	for n == 0 || buf[n-1] != '\n' {
		m, err := unix.Read(fd, buf[n:])
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrUnexpectedEOF
		}
		n += m
	}
	return n, nil
}

// nftDNAT installs, in the client namespace, what kube-proxy's nftables
// mode would: output-hook DNAT of front (TCP) and ufront (UDP) to a random
// backend, on a connection's first packet, with conntrack translating the
// rest. Its NAT hook turns conntrack on in the namespace; nftDelete turns
// it off again.
func (e *env) nftDNAT(front, ufront netip.AddrPort, bes []netip.AddrPort) error {
	var rs strings.Builder
	fmt.Fprintf(&rs, "table ip xdps_lb_compare {\n")
	var vm []string
	for i, b := range bes {
		fmt.Fprintf(&rs, "  chain be%d {\n    meta l4proto { tcp, udp } dnat to %s\n  }\n", i, b)
		vm = append(vm, fmt.Sprintf("%d : jump be%d", i, i))
	}
	fmt.Fprintf(&rs, "  chain svc {\n    numgen random mod %d vmap { %s }\n  }\n", len(bes), strings.Join(vm, ", "))
	fmt.Fprintf(&rs, "  chain out {\n    type nat hook output priority -100; policy accept;\n    ip daddr %s tcp dport %d jump svc\n    ip daddr %s udp dport %d jump svc\n  }\n",
		front.Addr(), front.Port(), ufront.Addr(), ufront.Port())
	fmt.Fprintf(&rs, "}\n")
	cmd := e.client.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rs.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %w: %s\n%s", err, out, rs.String())
	}
	return nil
}

// nftDelete removes nftDNAT's table.
func (e *env) nftDelete() error {
	if out, err := e.client.Command("nft", "delete", "table", "ip", "xdps_lb_compare").CombinedOutput(); err != nil {
		return fmt.Errorf("nft delete table: %w: %s", err, out)
	}
	return nil
}

// proxyEnv, set as "FRONT BACKEND,BACKEND,...", makes the test binary the
// comparison's user-space proxy (proxyMain): a process of its own.
const proxyEnv = "XDPSHIELD_LB_PROXY"

// proxyProcess starts the user-space L4 proxy as its own process in the
// client namespace (ip netns exec), born in the sibling cgroup (the
// balancer is not attached there), and waits until it listens.
func (e *env) proxyProcess(front netip.AddrPort, bes []netip.AddrPort) (func(), error) {
	cg, err := os.Open(e.sibling)
	if err != nil {
		return nil, err
	}
	defer cg.Close()
	var bs []string
	for _, b := range bes {
		bs = append(bs, b.String())
	}
	cmd := e.client.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), proxyEnv+"="+front.String()+" "+strings.Join(bs, ","))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		stop()
		return nil, fmt.Errorf("proxy process: %q, %v", line, err)
	}
	return stop, nil
}

// proxyMain is the proxy process: TCP (accept, dial a random backend, copy
// both ways) and UDP (a session per client address, to a random backend)
// on front, until killed.
func proxyMain(arg string) error {
	f, list, ok := strings.Cut(arg, " ")
	if !ok {
		return fmt.Errorf("proxy: bad argument %q", arg)
	}
	front, err := netip.ParseAddrPort(f)
	if err != nil {
		return err
	}
	bes := strings.Split(list, ",")
	ln, err := net.Listen("tcp", front.String())
	if err != nil {
		return err
	}
	pc, err := net.ListenPacket("udp", front.String())
	if err != nil {
		return err
	}
	go func() {
		var mu sync.Mutex
		sessions := map[string]net.Conn{}
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			up := sessions[from.String()]
			if up == nil {
				if up, err = net.Dial("udp", bes[rand.IntN(len(bes))]); err != nil {
					mu.Unlock()
					continue
				}
				sessions[from.String()] = up
				go func() {
					b := make([]byte, 2048)
					for {
						up.SetReadDeadline(time.Now().Add(30 * time.Second))
						m, err := up.Read(b)
						if err != nil {
							mu.Lock()
							delete(sessions, from.String())
							mu.Unlock()
							up.Close()
							return
						}
						pc.WriteTo(b[:m], from)
					}
				}()
			}
			mu.Unlock()
			up.Write(buf[:n])
		}
	}()
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", bes[rand.IntN(len(bes))])
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}
