package probe_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/probe"
)

func TestSlots(t *testing.T) {
	for _, ns := range []uint64{0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 1000, 1023, 1024, 1 << 20, 3<<20 + 7, 123456789, 1 << 40} {
		s := probe.SlotOf(ns)
		lo, hi := probe.SlotRange(s)
		assert.True(t, lo <= ns && ns < hi, "SlotOf(%d) = %d, whose range [%d, %d) does not hold it", ns, s, lo, hi)
		if ns >= 4 {
			assert.LessOrEqual(t, float64(hi-lo), float64(lo)/4, "slot %d = [%d, %d) is wider than a quarter of its lower bound", s, lo, hi)
		}
	}
	var prevHi uint64
	for i := range probe.Slots {
		lo, hi := probe.SlotRange(i)
		if lo == hi {
			continue // unused slot
		}
		require.Equal(t, prevHi, lo, "slot %d starts at %d, the slot before ends at %d: the slots must tile", i, lo, prevHi)
		prevHi = hi
	}
}

func TestQuantile(t *testing.T) {
	var h probe.Histogram
	for _, ms := range []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10} {
		h[probe.SlotOf(ms*1e6)] += 10
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.9, 9 * time.Millisecond}, {0.1, time.Millisecond}} {
		got := h.Quantile(tc.q)
		assert.InDelta(t, float64(tc.want), float64(got), float64(tc.want/4), "Quantile(%v) = %v, want %v within 25%%", tc.q, got, tc.want)
	}
}

// port of the delayed echo service.
const port = 7077

// Tolerance of the probe against the client: the probe sees the edge's
// side only, so it must not read more than the client (up to its slot
// error, 12.5% after interpolation and 25% at worst), and the client adds
// the veth round trip and its own wake-ups, bounded here by a quarter of
// its figure plus 2 ms (a busy 2-core machine).
func within(probeD, client time.Duration) bool {
	return probeD <= client+client/4 && probeD >= client-client/4-2*time.Millisecond
}

// TestTimingsMatchClient attaches the probe to the edge's client link and
// times a delayed echo service over UDP and TCP, IPv4 and IPv6: each
// flow's p50 and p90 must agree with what the client measured itself.
func TestTimingsMatchClient(t *testing.T) {
	testutil.Root(t)
	for _, clsact := range []bool{false, true} {
		t.Run(fmt.Sprintf("clsact=%v", clsact), func(t *testing.T) { timings(t, clsact) })
	}
}

func timings(t *testing.T, clsact bool) {
	top, err := storm.NewTopology()
	require.NoError(t, err)
	t.Cleanup(func() { top.Close() })
	p, err := probe.Load(probe.Options{Port: port, Clsact: clsact})
	require.NoError(t, err)
	require.NoError(t, top.Edge.Do(func() error { return p.Attach(top.FrontIfindex) }))
	t.Cleanup(func() { top.Edge.Do(p.Close) })
	wantMode := probe.ModeClsact
	if testutil.KernelAtLeast(6, 6) && !clsact {
		wantMode = probe.ModeTCX
	}
	assert.Equal(t, wantMode, p.Mode(), "Mode() on this kernel")
	stop := serveEcho(t, top.Edge)
	defer stop()

	for _, delay := range []time.Duration{2 * time.Millisecond, 10 * time.Millisecond} {
		for _, dst := range []netip.Addr{storm.Front4, storm.Front6} {
			for _, network := range []string{"udp", "tcp"} {
				t.Run(fmt.Sprintf("%s-%s-%v", network, dst, delay), func(t *testing.T) {
					// A client stalled on a busy machine reads more than
					// the probe can (p90 9.0 ms against the probe's 3.7
					// for a 2 ms delay, once in make test beside a VM): a
					// probe under the client's tolerance is asked once
					// more on a new flow. A probe reading more than the
					// client is its own error and fails at once.
					for attempt := 1; ; attempt++ {
						under := timeFlow(t, p, top, network, dst, delay, attempt == 2)
						if !under || attempt == 2 {
							break
						}
						t.Logf("RERUN: the probe read under the client's tolerance; once more on a new flow")
					}
				})
			}
		}
	}
	st, err := p.Stats()
	require.NoError(t, err)
	assert.True(t, st.Answered > 0 && st.Answered <= st.Requests, "Stats() = %+v: want answers, no more than requests", st)
}

// timeFlow times n requests of one flow and compares the probe's p50 and
// p90 with the client's. It reports a probe under the client's tolerance
// (and over none) without failing t unless last is set.
func timeFlow(t *testing.T, p *probe.Probe, top *storm.Topology, network string, dst netip.Addr, delay time.Duration, last bool) (under bool) {
	t.Helper()
	const n = 60
	lat, local := ask(t, top.Storm, network, netip.AddrPortFrom(dst, port), delay, n)
	flows, err := p.Flows()
	require.NoError(t, err)
	var f *probe.Flow
	for i := range flows {
		if flows[i].Client == local {
			f = &flows[i]
		}
	}
	require.NotNil(t, f, "the probe has no flow from %s (it has %d flows)", local, len(flows))
	// TCP: the handshake (SYN, SYN-ACK) is timed too.
	want := uint64(n)
	if network == "tcp" {
		want++
	}
	assert.Equal(t, want, f.Count, "flow %s: requests timed", local)
	c50, c90 := parts.Quantile(lat, 0.5), parts.Quantile(lat, 0.9)
	p50, p90 := f.Histogram.Quantile(0.5), f.Histogram.Quantile(0.9)
	t.Logf("client p50 %v p90 %v; probe p50 %v p90 %v (%d timed)", c50, c90, p50, p90, f.Count)
	over := p50 > c50+c50/4 || p90 > c90+c90/4
	if !over && !last && !(within(p50, c50) && within(p90, c90)) {
		return true
	}
	assert.True(t, within(p50, c50) && within(p90, c90), "probe p50 %v p90 %v, client p50 %v p90 %v: outside the tolerance", p50, p90, c50, c90)
	return false
}

// serveEcho answers each request (an 8-byte big-endian delay in
// nanoseconds) after that delay, over UDP and TCP, inside ns.
func serveEcho(t *testing.T, ns *topo.NS) (stop func()) {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	require.NoError(t, ns.Do(func() error {
		var err error
		if pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port)); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}))
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n == 8 {
				time.Sleep(time.Duration(binary.BigEndian.Uint64(buf)))
				pc.WriteTo(buf[:8], from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 8)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					time.Sleep(time.Duration(binary.BigEndian.Uint64(buf)))
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return func() { pc.Close(); ln.Close() }
}

// ask sends n requests for delay over one socket from ns and returns the
// round trips it measured and its own address.
func ask(t *testing.T, ns *topo.NS, network string, to netip.AddrPort, delay time.Duration, n int) ([]time.Duration, netip.AddrPort) {
	t.Helper()
	var c net.Conn
	require.NoError(t, ns.Do(func() error {
		var err error
		c, err = net.DialTimeout(network, to.String(), 2*time.Second)
		return err
	}))
	defer c.Close()
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	r := bufio.NewReader(c)
	req := binary.BigEndian.AppendUint64(nil, uint64(delay))
	resp := make([]byte, 8)
	var lat []time.Duration
	for range n {
		// A guard against a hang, not a bound on latency: at load 19 on
		// 2 cores (the privileged suite beside eight other jobs) one UDP
		// round trip of a 2 ms request outlasted a 2 s deadline.
		c.SetDeadline(time.Now().Add(15 * time.Second))
		start := time.Now()
		_, err := c.Write(req)
		require.NoError(t, err)
		_, err = io.ReadFull(r, resp)
		require.NoError(t, err)

		lat = append(lat, time.Since(start))
		time.Sleep(time.Millisecond)
	}
	return lat, netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
}
