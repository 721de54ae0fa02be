package lb

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

func family(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ipv4"
}

func vipOf(v6 bool) netip.Addr {
	if v6 {
		return vip6
	}
	return vip4
}

func clientOf(v6 bool) netip.Addr {
	if v6 {
		return clientAddr6
	}
	return clientAddr4
}

// TestTCP: a connect to the VIP lands on a backend, which sees the client's
// own address; getpeername says the VIP; the reverse entry lives exactly as
// long as the socket.
func TestTCP(t *testing.T) {
	e := newEnv(t, 3)
	for _, v6 := range []bool{false, true} {
		t.Run(family(v6), func(t *testing.T) {
			k := lbconf.ServiceKey{VIP: vipOf(v6), Port: 80, Proto: lbconf.TCP}
			bes := backendAddrs(v6, 3)
			require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(bes...)}))
			defer e.lb.RemoveService(k)
			vip := netip.AddrPortFrom(k.VIP, k.Port)

			c, err := e.dial(vip, netip.AddrPort{})
			require.NoError(t, err, "dial %s", vip)
			r, err := c.ask()
			require.NoError(t, err)
			require.False(t, r.kind != "B" || !slices.Contains(bes, r.local), "connect %s reached %s %s, want one of the backends %v", vip, r.kind, r.local, bes)
			assert.False(t, r.remote.Addr() != clientOf(v6), "backend saw the client as %s, want the client's own address %s", r.remote.Addr(), clientOf(v6))
			peer, err := c.peer()
			require.NoError(t, err)
			assert.False(t, unmap(peer) != vip, "getpeername = %s, want the VIP %s", peer, vip)
			before, err := e.lb.StateCounters()
			require.NoError(t, err)
			got, ok, err := e.reverseOf(c, r.local)
			assert.False(t, err != nil || !ok || got != vip, "Reverse(socket, %s) = %s, %v, %v; want %s, true while the socket is open", r.local, got, ok, err, vip)
			c.Close()
			// close(2) runs sock_release synchronously; Go may hold the fd
			// for a moment while its poller lets go.
			after := before
			for deadline := time.Now().Add(2 * time.Second); after.Released == before.Released && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				after, err = e.lb.StateCounters()
				require.NoError(t, err)
			}
			if got := after.Released - before.Released; got != 1 {
				assert.Fail(t, fmt.Sprintf("released states grew by %d after close, want 1 (the socket's state gone with it)", got))
			}

			cnt, err := e.lb.Counters()
			require.NoError(t, err)
			if got := cnt.Services[k][Translated]; got != 1 {
				assert.Fail(t, fmt.Sprintf("translated = %d, want 1 (one connect)", got))
			}
		})
	}
}

// reverseOf is Reverse for a Go connection's socket.
func (e *env) reverseOf(c syscall.Conn, backend netip.AddrPort) (vip netip.AddrPort, ok bool, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return vip, false, err
	}
	if cerr := rc.Control(func(fd uintptr) { vip, ok, err = e.lb.Reverse(int(fd), backend) }); cerr != nil {
		return vip, false, cerr
	}
	return vip, ok, err
}

func backends(as ...netip.AddrPort) []lbconf.Backend {
	var out []lbconf.Backend
	for _, a := range as {
		out = append(out, lbconf.Backend{Addr: a})
	}
	return out
}

// TestUDP: unconnected UDP is translated per message, to the backend the
// socket chose first, and recvfrom reports the VIP; connected UDP is
// translated at connect.
func TestUDP(t *testing.T) {
	e := newEnv(t, 4)
	for _, v6 := range []bool{false, true} {
		t.Run(family(v6), func(t *testing.T) {
			k := lbconf.ServiceKey{VIP: vipOf(v6), Port: 53, Proto: lbconf.UDP}
			bes := backendAddrs(v6, 4)
			require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(bes...)}))
			defer e.lb.RemoveService(k)
			vip := netip.AddrPortFrom(k.VIP, k.Port)

			var pc *net.UDPConn
			err := e.client.Do(func() error {
				var err error
				pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(clientOf(v6), 0)))
				return err
			})
			require.NoError(t, err)
			defer pc.Close()
			const msgs = 40
			seen := map[netip.AddrPort]int{}
			buf := make([]byte, 512)
			for i := range msgs {
				_, err := pc.WriteToUDPAddrPort([]byte("?\n"), vip)
				require.NoError(t, err, "message %d: sendto %s", i, vip)
				pc.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, from, err := pc.ReadFromUDPAddrPort(buf)
				require.NoError(t, err, "message %d: recvfrom", i)
				require.False(t, unmap(from) != vip, "message %d: recvfrom reports %s, want the VIP %s", i, from, vip)
				r, err := parseReply(string(buf[:n]))
				require.NoError(t, err)
				require.False(t, r.kind != "B" || !slices.Contains(bes, r.local), "message %d reached %s %s, want a backend", i, r.kind, r.local)
				assert.False(t, r.remote.Addr() != clientOf(v6), "backend saw %s, want the client %s", r.remote.Addr(), clientOf(v6))
				seen[r.local]++
			}
			// One socket, one backend (TestUDPPerSocket has the spread).
			assert.False(t, len(seen) != 1, "%d messages of one socket reached %v, want one backend", msgs, seen)
			cnt, _ := e.lb.Counters()
			if got := cnt.Services[k][Translated]; got != msgs {
				assert.Fail(t, fmt.Sprintf("translated = %d, want %d (one per message)", got, msgs))
			}

			// Connected UDP: connect picks, recv reports the VIP.
			var cc *net.UDPConn
			err = e.client.Do(func() error {
				c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(vip))
				cc = c
				return err
			})
			require.NoError(t, err)
			defer cc.Close()
			_, err = cc.Write([]byte("?\n"))
			require.NoError(t, err)
			cc.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, from, err := cc.ReadFromUDPAddrPort(buf)
			require.NoError(t, err)
			r, err := parseReply(string(buf[:n]))
			require.NoError(t, err)
			assert.False(t, unmap(from) != vip || !slices.Contains(bes, r.local), "connected UDP: reply from %s by %s, want from the VIP %s by a backend", from, r.local, vip)
		})
	}
}

// TestOutside: a process outside the cgroup is not translated, nor is a
// socket inside it to a port or protocol that is no service.
func TestOutside(t *testing.T) {
	e := newEnv(t, 2)
	for _, v6 := range []bool{false, true} {
		t.Run(family(v6), func(t *testing.T) {
			k := lbconf.ServiceKey{VIP: vipOf(v6), Port: 80, Proto: lbconf.TCP}
			require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(backendAddrs(v6, 2)...)}))
			defer e.lb.RemoveService(k)
			vip := netip.AddrPortFrom(k.VIP, k.Port)

			// Inside: translated (the reference: the same dial does reach a
			// backend from here).
			r, err := e.ask1(vip, netip.AddrPort{})
			require.False(t, err != nil || r.kind != "B", "inside the cgroup: %+v, %v; want a backend", r, err)
			// Outside: a child process in the sibling cgroup reaches the
			// decoy listening on the VIP itself.
			out, err := e.helper(e.sibling, vip)
			require.NoError(t, err)
			assert.False(t, out.kind != "D" || out.local != vip, "outside the cgroup: reached %s %s, want the decoy on the VIP %s (untouched)", out.kind, out.local, vip)
			// The same helper placed inside is translated: it proves the
			// helper can tell.
			in, err := e.helper(e.cgroup, vip)
			require.NoError(t, err)
			assert.False(t, in.kind != "B", "helper inside the cgroup reached %s %s, want a backend", in.kind, in.local)

			before, _ := e.lb.Counters()
			other := netip.AddrPortFrom(k.VIP, 81)
			if r, err := e.ask1(other, netip.AddrPort{}); err != nil || r.kind != "D" {
				assert.Fail(t, fmt.Sprintf("TCP to %s (no service): %+v, %v; want the decoy", other, r, err))
			}
			// UDP to the TCP service's VIP and port: another protocol.
			if r, err := e.udpAsk(vip); err != nil || r.kind != "D" {
				assert.Fail(t, fmt.Sprintf("UDP to %s (a TCP service): %+v, %v; want the decoy", vip, r, err))
			}
			after, _ := e.lb.Counters()
			if got := after.NotService - before.NotService; got != 2 {
				assert.Fail(t, fmt.Sprintf("not_service grew by %d, want 2", got))
			}
			if got := after.Services[k][Translated] - before.Services[k][Translated]; got != 0 {
				assert.Fail(t, fmt.Sprintf("translated grew by %d, want 0", got))
			}
		})
	}
}

// udpAsk sends one datagram to dst from an unconnected socket in the
// client namespace and parses the answer.
func (e *env) udpAsk(dst netip.AddrPort) (reply, error) {
	var pc *net.UDPConn
	err := e.client.Do(func() error {
		var err error
		pc, err = net.ListenUDP("udp", nil)
		return err
	})
	if err != nil {
		return reply{}, err
	}
	defer pc.Close()
	if _, err := pc.WriteToUDPAddrPort([]byte("?\n"), dst); err != nil {
		return reply{}, err
	}
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, _, err := pc.ReadFromUDPAddrPort(buf)
	if err != nil {
		return reply{}, err
	}
	return parseReply(string(buf[:n]))
}

// TestNoBackend: a service whose every backend is draining refuses connect
// and sendto with Refusal's errno (ECONNREFUSED on 5.18+, EPERM before).
func TestNoBackend(t *testing.T) {
	e := newEnv(t, 2)
	for _, proto := range []lbconf.Proto{lbconf.TCP, lbconf.UDP} {
		t.Run(string(proto), func(t *testing.T) {
			k := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: proto}
			bes := backendAddrs(false, 2)
			require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Maglev, Backends: backends(bes...)}))
			defer e.lb.RemoveService(k)
			vip := netip.AddrPortFrom(k.VIP, k.Port)
			require.NoError(t, e.lb.DrainBackends(k, bes))
			want := e.lb.Refusal()
			if got, wantNew := want, testutil.KernelAtLeast(5, 18); wantNew && got != syscall.ECONNREFUSED {
				assert.Fail(t, fmt.Sprintf("Refusal() = %v on a 5.18+ kernel, want ECONNREFUSED (bpf_set_retval)", got))
			}
			const tries = 3
			for range tries {
				var err error
				if proto == lbconf.TCP {
					_, err = e.dial(vip, netip.AddrPort{})
				} else {
					_, err = e.udpAsk(vip)
				}
				require.True(t, errors.Is(err, want), "%s to %s with every backend draining: %v, want %v", proto, vip, err, want)
			}
			cnt, _ := e.lb.Counters()
			if got := cnt.Services[k][NoBackend]; got != tries {
				assert.Fail(t, fmt.Sprintf("no_backend = %d, want %d", got, tries))
			}
			// Undrain one: it works again.
			require.NoError(t, e.lb.AddBackends(k, bes[:1]))
			if proto == lbconf.TCP {
				if r, err := e.ask1(vip, netip.AddrPort{}); err != nil || r.local != bes[0] {
					assert.Fail(t, fmt.Sprintf("after undraining %s: %+v, %v", bes[0], r, err))
				}
			}
		})
	}
}

// TestMapped: an IPv6 socket connecting to an IPv4 service's VIP written
// IPv4-mapped (::ffff:a.b.c.d) goes through connect6, whose key is the
// mapped address the IPv4 service is stored under: it is balanced to the
// IPv4 backend (mapped), and getpeername says the mapped VIP.
func TestMapped(t *testing.T) {
	e := newEnv(t, 2)
	k := lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP}
	bes := backendAddrs(false, 2)
	require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(bes...)}))
	var fd int
	var peer unix.Sockaddr
	buf := make([]byte, 256)
	var n int
	err := e.client.Do(func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
		if err := unix.Connect(fd, &unix.SockaddrInet6{Addr: netip.AddrFrom16(vip4.As16()).As16(), Port: 80}); err != nil {
			return fmt.Errorf("connect [::ffff:%s]:80: %w", vip4, err)
		}
		if peer, err = unix.Getpeername(fd); err != nil {
			return err
		}
		if _, err := unix.Write(fd, []byte("?\n")); err != nil {
			return err
		}
		n, err = unix.Read(fd, buf)
		return err
	})
	if fd > 0 {
		defer unix.Close(fd)
	}
	require.NoError(t, err)
	r, err := parseReply(string(buf[:n]))
	require.NoError(t, err)
	assert.False(t, r.kind != "B" || !slices.Contains(bes, r.local), "connect to the mapped VIP reached %s %s, want an IPv4 backend", r.kind, r.local)
	if got, want := sockaddrAddr(peer), netip.AddrPortFrom(netip.AddrFrom16(vip4.As16()), 80); got != want {
		assert.Fail(t, fmt.Sprintf("getpeername = %s, want the mapped VIP %s", got, want))
	}
}
