package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/probe"
)

func TestProbeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-iface is required"},
		{[]string{"-iface", "lo", "-port", "70000"}, "out of range"},
		{[]string{"-iface", "lo", "-interval", "0s"}, "must be positive"},
		{[]string{"-iface", "no-such-iface0"}, "no-such-iface0"},
		{[]string{"-iface", "lo", "extra"}, "unexpected arguments"},
	} {
		err := Commands()["probe"].Run(context.Background(), testEnv(os.Stdout), tc.args)
		assert.ErrorContains(t, err, tc.want, "shield probe %q = %v, want an error containing %q", tc.args, err, tc.want)
	}
}

// TestProbeJSON runs shield probe -json on loopback in a namespace of its
// own and sends it UDP requests and answers: the last snapshot must have
// timed them.
func TestProbeJSON(t *testing.T) {
	testutil.Root(t)
	ns := newLoopbackNS(t)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- ns.Do(func() error {
			return Commands()["probe"].Run(context.Background(), testEnv(&out), []string{"-iface", "lo", "-port", "7078", "-json", "-interval", "300ms", "-duration", "1500ms"})
		})
	}()
	time.Sleep(500 * time.Millisecond)
	const n = 20
	udpPingPong(t, ns, 7078, n)
	require.NoError(t, <-done, "shield probe")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var last probeSnapshot
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last), "last -json line %q", lines[len(lines)-1])
	assert.EqualValues(t, n, last.Stats.Answered, "shield probe -json = %+v, want %d answered requests on one flow", last, n)
	if assert.Len(t, last.Flows, 1, "shield probe -json = %+v, want %d answered requests on one flow", last, n) {
		assert.EqualValues(t, n, last.Flows[0].Count, "shield probe -json = %+v, want %d answered requests on one flow", last, n)
	}
	assert.NotEmpty(t, last.Mode, "shield probe -json = %+v, want %d answered requests on one flow", last, n)
	var inHist uint64
	for _, s := range last.Slots {
		inHist += s.Count
	}
	assert.EqualValues(t, n, inHist, "histogram holds %d requests (p50 %v), want %d", inHist, last.P50, n)
	assert.True(t, last.P50 > 0, "histogram holds %d requests (p50 %v), want %d", inHist, last.P50, n)
}

func newLoopbackNS(t *testing.T) *topo.NS {
	t.Helper()
	ns, err := topo.New("probecli")
	require.NoError(t, err)
	t.Cleanup(func() { ns.Close() })
	return ns
}

// udpPingPong sends n requests to port on loopback inside ns and answers
// each, one at a time.
func udpPingPong(t *testing.T, ns *topo.NS, port, n int) {
	t.Helper()
	err := ns.Do(func() error {
		srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			return err
		}
		defer srv.Close()
		cl, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
		if err != nil {
			return err
		}
		defer cl.Close()
		buf := make([]byte, 16)
		for range n {
			if _, err := cl.Write([]byte("ping")); err != nil {
				return err
			}
			srv.SetReadDeadline(time.Now().Add(time.Second))
			_, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return err
			}
			if _, err := srv.WriteToUDP([]byte("pong"), from); err != nil {
				return err
			}
			cl.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := cl.Read(buf); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
}

func TestPrintProbe(t *testing.T) {
	var h probe.Histogram
	h[probe.SlotOf(150_000)] = 30
	h[probe.SlotOf(3_000_000)] = 1
	s := probeSnapshot{Iface: "eth0", Mode: probe.ModeTCX, Seconds: 2, Stats: probe.Stats{Requests: 31, Answered: 31},
		P50: h.Quantile(0.5), P99: h.Quantile(0.99),
		Flows: []probe.Flow{{Client: netip.MustParseAddrPort("198.18.4.2:40000"), Server: netip.MustParseAddrPort("198.18.4.1:443"),
			Proto: "tcp", Count: 31, Mean: 240 * time.Microsecond, P50: 150 * time.Microsecond, P99: 3 * time.Millisecond}},
		AllFlows: 3}
	for i, c := range h {
		if c > 0 {
			lo, hi := probe.SlotRange(i)
			s.Slots = append(s.Slots, probeSlot{lo, hi, c})
		}
	}
	var b bytes.Buffer
	printProbe(&b, s)
	out := b.String()
	for _, want := range []string{"on eth0 (tcx)", "31 requests, 31 answered", "198.18.4.2:40000 > 198.18.4.1:443", strings.Repeat("#", 50), "(2 more flows)"} {
		assert.Contains(t, out, want, "printProbe output lacks %q:\n%s", want, out)
	}
}
