package lb

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
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
	name  string
	front netip.AddrPort
	setup func(t *testing.T) // before each of its rounds
}

type sample struct {
	connect, first []time.Duration
	requests       int
	elapsed        time.Duration
	rates          []float64 // keep-alive requests/s, per round
}

// TestCompare measures, in one run and at the same offered load, connection
// setup (connect() and the first reply) and keep-alive request throughput
// through: the socket balancer; per-packet DNAT with nftables, as
// kube-proxy's nftables mode builds it; a user-space L4 proxy in Go; and,
// as the reference, a backend dialled directly. Rounds of the methods
// interleave, in a new random order each round, so drift on a shared
// machine hits them alike.
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
	k := ServiceKey{VIP: vip4, Port: 80, Proto: TCP}
	if err := e.lb.AddService(Service{ServiceKey: k, Mode: Random, Backends: backends(bes...)}); err != nil {
		t.Fatal(err)
	}
	if err := e.nftDNAT(nftVIP, bes); err != nil {
		t.Fatal(err)
	}
	stop, err := e.proxy(proxyVIP, bes)
	if err != nil {
		t.Fatal(err)
	}
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
			if err != nil {
				t.Fatal(err)
			}
			attached = on
		}
	}
	methods := []method{
		{"direct to a backend (reference)", bes[0], attach(false)},
		{"socket balancer (lb)", netip.AddrPortFrom(k.VIP, k.Port), attach(true)},
		{"nftables DNAT", nftVIP, attach(false)},
		{"user-space proxy (Go)", proxyVIP, attach(false)},
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
			if err != nil {
				t.Fatalf("%s, round %d: %v", m.name, r, err)
			}
			res[i].connect = append(res[i].connect, s.connect...)
			res[i].first = append(res[i].first, s.first...)
			res[i].rates = append(res[i].rates, float64(s.requests)/s.elapsed.Seconds())
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d new connections and %d keep-alive requests (%d connections) per method, %d interleaved rounds\n",
		*compareConnects, *compareRequests, *compareConns, rounds)
	fmt.Fprintf(&b, "| method | connect p50 | connect p99 | 1st reply p50 | 1st reply p99 | requests/s (median of rounds) |\n|---|---|---|---|---|---|\n")
	for i, m := range methods {
		s := res[i]
		slices.Sort(s.rates)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.0f |\n", m.name,
			us(pct(s.connect, 50)), us(pct(s.connect, 99)), us(pct(s.first, 50)), us(pct(s.first, 99)),
			s.rates[len(s.rates)/2])
	}
	t.Log("\n" + b.String())
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
// mode would: output-hook DNAT of front to a random backend, per packet of
// the connection's first packet, with conntrack translating the rest.
func (e *env) nftDNAT(front netip.AddrPort, bes []netip.AddrPort) error {
	var rs strings.Builder
	fmt.Fprintf(&rs, "table ip xdps_lb_compare {\n")
	var vm []string
	for i, b := range bes {
		fmt.Fprintf(&rs, "  chain be%d {\n    meta l4proto tcp dnat to %s\n  }\n", i, b)
		vm = append(vm, fmt.Sprintf("%d : jump be%d", i, i))
	}
	fmt.Fprintf(&rs, "  chain svc {\n    numgen random mod %d vmap { %s }\n  }\n", len(bes), strings.Join(vm, ", "))
	fmt.Fprintf(&rs, "  chain out {\n    type nat hook output priority -100; policy accept;\n    ip daddr %s tcp dport %d jump svc\n  }\n", front.Addr(), front.Port())
	fmt.Fprintf(&rs, "}\n")
	cmd := e.client.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rs.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %w: %s\n%s", err, out, rs.String())
	}
	return nil
}

// proxy runs a user-space L4 proxy on front in the client namespace: accept,
// dial a random backend, copy both ways.
func (e *env) proxy(front netip.AddrPort, bes []netip.AddrPort) (func(), error) {
	var ln net.Listener
	err := e.client.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", front.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				var d net.Dialer
				// The listener's socket is in the client namespace; the
				// dial's socket is made on this goroutine's thread, so
				// enter the namespace for it.
				var up net.Conn
				err := e.client.Do(func() error {
					var err error
					up, err = d.DialContext(ctx, "tcp", bes[rand.IntN(len(bes))].String())
					return err
				})
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
	}()
	return func() { cancel(); ln.Close(); wg.Wait() }, nil
}
