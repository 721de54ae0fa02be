package parts

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// rcvBuf is the service socket's receive buffer for a capacity: the queue a
// flood overflows, about a tenth of a second of the service's work (a
// datagram through a veth with an XDP program costs its socket a page or
// more), within [64 KiB, 8 MiB]. Set with SO_RCVBUFFORCE, so it does not
// depend on a machine's net.core.rmem_max; large enough for the first burst
// a shield lets through from a storm's new sources, small enough that a
// backlog drains within a phase's settle time.
func rcvBuf(capacity float64) int {
	return int(min(max(capacity/10*4096, 64<<10), 8<<20))
}

// DatagramService answers every datagram it reads on DatagramPort with one
// carrying the same first 8 bytes, at most Capacity a second: a service of
// known capacity, as every real one has (a resolver's cache misses, a QUIC
// server's handshakes). What arrives faster waits in the socket's receive
// buffer, and what the buffer cannot hold the kernel drops: a flood that
// reaches the socket makes legitimate requests wait or vanish, which is the
// harm the shield exists to prevent. The pace is set rather than left to the
// CPU, so the harm is the same on a fast host and in an emulated VM.
type DatagramService struct {
	conn     *net.UDPConn
	capacity float64
	wg       sync.WaitGroup
	served   atomic.Uint64
}

// paceSlack is how far behind its schedule the service may fall and still
// catch up: after an idle moment it answers up to a quarter second of its
// capacity at once (a pool of workers, each free), never more than its
// capacity over a longer stretch. So a shield's first burst of a storm is
// answered at once, and a storm's sustained excess is not.
const paceSlack = 250 * time.Millisecond

// StartDatagramService listens on DatagramPort of every address inside ns
// (one dual-stack socket, shared by the flood and the client, as a real
// service's would be) and answers at most capacity requests a second.
func StartDatagramService(ns *topo.NS, capacity float64) (*DatagramService, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("datagram service capacity %v: want > 0", capacity)
	}
	var conn *net.UDPConn
	if err := ns.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp", &net.UDPAddr{Port: storm.DatagramPort})
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen on udp port %d in %s: %w", storm.DatagramPort, ns.Name, err)
	}
	return ServeDatagram(conn, capacity)
}

// ServeDatagram runs the service on conn (a socket already bound in the
// edge's namespace): the study runs it in a process of its own, beside the
// edge server, to measure the edge's CPU time apart from the client's.
func ServeDatagram(conn *net.UDPConn, capacity float64) (*DatagramService, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("datagram service capacity %v: want > 0", capacity)
	}
	if err := setRcvBufForce(conn, rcvBuf(capacity)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("receive buffer: %w", err)
	}
	s := &DatagramService{conn: conn, capacity: capacity}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *DatagramService) serve() {
	defer s.wg.Done()
	buf := make([]byte, 2048)
	every := time.Duration(float64(time.Second) / s.capacity)
	next := time.Now()
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if n >= 8 {
			// Best effort, as a real service's answer: one to a forged
			// source dies in the storm namespace's blackhole.
			s.conn.WriteToUDPAddrPort(buf[:8], from)
		}
		s.served.Add(1)
		// Pace: one request per 1/capacity. Sleep only when more than a
		// millisecond ahead; time not spent answering (idle, or a sleep
		// that overran on a busy machine) is made up by answering at once,
		// up to paceSlack of it.
		next = next.Add(every)
		now := time.Now()
		if d := next.Sub(now); d > time.Millisecond {
			time.Sleep(d)
		} else if d < -paceSlack {
			next = now.Add(-paceSlack)
		}
	}
}

func setRcvBufForce(conn *net.UDPConn, n int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		return err
	}
	return serr
}

// Served is how many requests the service has answered.
func (s *DatagramService) Served() uint64 { return s.served.Load() }

// Close stops the service.
func (s *DatagramService) Close() error {
	err := s.conn.Close()
	s.wg.Wait()
	return err
}

// datagramLoop asks the service at dst every 1/rate seconds from a socket in
// ns, as a stub resolver would: a request unanswered within cfg.UDPAttempt
// is sent again, up to cfg.UDPAttempts times; it fails when none is
// answered. Its latency runs from the first send to the answer.
func (c *Client) datagramLoop(ctx context.Context, ns *topo.NS, dst netip.Addr, rate float64) {
	var conn *net.UDPConn
	err := ns.Do(func() error {
		var err error
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, storm.DatagramPort)))
		return err
	})
	if err != nil {
		c.rec.add(Datagram, time.Now(), 0, fmt.Errorf("dial udp %s: %w", dst, err))
		return
	}
	defer conn.Close()
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	every := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	var id uint64
	buf := make([]byte, 64)
	req := make([]byte, 8)
	for ctx.Err() == nil {
		id++
		binary.BigEndian.PutUint64(req, id)
		began := time.Now()
		err := fmt.Errorf("no answer to %d attempts of %v", c.cfg.UDPAttempts, c.cfg.UDPAttempt)
	attempts:
		for range c.cfg.UDPAttempts {
			if _, werr := conn.Write(req); werr != nil {
				err = werr
				break
			}
			deadline := time.Now().Add(c.cfg.UDPAttempt)
			conn.SetReadDeadline(deadline)
			for {
				n, rerr := conn.Read(buf)
				if rerr != nil {
					break // timed out: send again
				}
				if n >= 8 && binary.BigEndian.Uint64(buf) == id {
					err = nil
					break attempts
				}
				// An answer to an earlier attempt: keep waiting.
			}
		}
		if ctx.Err() != nil {
			return // cancelled mid-request: not a failure of the edge
		}
		c.rec.add(Datagram, began, time.Since(began), err)
		next = next.Add(every)
		if now := time.Now(); next.Before(now) {
			next = now
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(next)):
		}
	}
}

// UDPCounters are the kernel's UDP counters (IPv4 and IPv6 summed) of a
// namespace: where datagrams aimed at the service went.
type UDPCounters struct {
	InDatagrams  uint64 `json:"in_datagrams"`   // delivered to a socket
	RcvbufErrors uint64 `json:"rcvbuf_errors"`  // dropped at a full socket: the harm
	InCsumErrors uint64 `json:"in_csum_errors"` // dropped for a bad checksum
	NoPorts      uint64 `json:"no_ports"`
}

func (c UDPCounters) Sub(o UDPCounters) UDPCounters {
	return UDPCounters{c.InDatagrams - o.InDatagrams, c.RcvbufErrors - o.RcvbufErrors,
		c.InCsumErrors - o.InCsumErrors, c.NoPorts - o.NoPorts}
}

// ReadUDPCounters reads /proc/net/snmp and snmp6 as seen from inside ns.
func ReadUDPCounters(ns *topo.NS) (UDPCounters, error) {
	var c UDPCounters
	err := ns.Do(func() error {
		// thread-self: /proc/self/net is the thread group leader's
		// namespace, not this thread's.
		snmp, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var names []string
		for _, line := range strings.Split(string(snmp), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i := 1; i < len(f) && i < len(names); i++ {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				c.add(names[i], v)
			}
		}
		snmp6, err := os.ReadFile("/proc/thread-self/net/snmp6")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(snmp6), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasPrefix(f[0], "Udp6") {
				v, _ := strconv.ParseUint(f[1], 10, 64)
				c.add(strings.TrimPrefix(f[0], "Udp6"), v)
			}
		}
		return nil
	})
	return c, err
}

func (c *UDPCounters) add(name string, v uint64) {
	switch name {
	case "InDatagrams":
		c.InDatagrams += v
	case "RcvbufErrors":
		c.RcvbufErrors += v
	case "InCsumErrors":
		c.InCsumErrors += v
	case "NoPorts":
		c.NoPorts += v
	}
}
