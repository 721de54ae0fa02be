package lb

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestAffinity: with session affinity, a client's new sockets get the
// backend its last one got, across sockets: per bound source address, and
// per network namespace for unbound sockets; the entry expires after the
// service's idle timeout, and a draining backend is not kept. Random mode
// over 4 backends: without affinity, 12 sockets of one client all on one
// backend has probability 4·(1/4)^12 = 2.4e-7.
func TestAffinity(t *testing.T) {
	// Under TCG (the VM matrix) each socket costs ~0.3 s: 6 sockets per
	// client still leave affinity-less luck at 4·(1/4)^6 = 1e-3.
	n := 12
	if testutil.InVM() {
		n = 6
	}
	e := newEnv(t, 4)
	second := netip.MustParseAddr("198.18.0.2")
	require.NoError(t, e.client.AddAddr("c0", second.String()+"/24"))
	bes := backendAddrs(false, 4)
	k := lbconf.ServiceKey{VIP: vip4, Port: 53, Proto: lbconf.UDP}
	vip := netip.AddrPortFrom(k.VIP, k.Port)
	const timeout = 300 * time.Millisecond
	require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(bes...), Affinity: timeout}))
	got, ok := e.lb.Service(k)
	require.True(t, ok)
	assert.Equal(t, timeout, got.Affinity)

	// which connects a new socket from src (unbound when invalid) and
	// returns its backend.
	which := func(src netip.Addr) netip.AddrPort {
		t.Helper()
		fd, err := e.udpConnect(t, src, vip)
		require.NoError(t, err)
		defer unix.Close(fd)
		var found []netip.AddrPort
		for _, b := range bes {
			v, ok, err := e.lb.Reverse(fd, b)
			require.NoError(t, err)
			if ok && v == vip {
				found = append(found, b)
			}
		}
		require.Len(t, found, 1, "translations of one socket")
		return found[0]
	}
	same := func(src netip.Addr) netip.AddrPort {
		t.Helper()
		first := which(src)
		for i := 1; i < n; i++ {
			require.Equal(t, first, which(src), "socket %d of client %v", i, src)
		}
		return first
	}
	for _, src := range []netip.Addr{clientAddr4, second, {}} {
		same(src)
	}

	// A draining backend is not kept: the client moves, and stays.
	b := same(clientAddr4)
	require.NoError(t, e.lb.DrainBackends(k, []netip.AddrPort{b}))
	moved := same(clientAddr4)
	assert.NotEqual(t, b, moved, "affinity kept a draining backend")
	require.NoError(t, e.lb.AddBackends(k, []netip.AddrPort{b}))

	// Idle past the timeout, the client chooses again: some round of up
	// to 12 picks another backend (all the same: (1/4)^12).
	changed := false
	last := which(second)
	for range 12 {
		time.Sleep(timeout + 50*time.Millisecond)
		if c := which(second); c != last {
			changed = true
			break
		}
	}
	assert.True(t, changed, "after the timeout, 12 new choices all gave %s", last)

	// Off: sockets spread again.
	require.NoError(t, e.lb.RemoveService(k))
	require.NoError(t, e.lb.AddService(lbconf.Service{ServiceKey: k, Mode: lbconf.Random, Backends: backends(bes...)}))
	// 12 sockets even in the VM: with fewer, an unlucky spread (one
	// backend for all) would fail the test one run in a thousand.
	seen := map[netip.AddrPort]bool{}
	for range 12 {
		seen[which(clientAddr4)] = true
	}
	assert.Greater(t, len(seen), 1, "without affinity, %d sockets from one client all chose one backend", 12)
}

// TestAffinityConfig: affinity_timeout in the configuration file.
func TestAffinityConfig(t *testing.T) {
	testutil.HostOnly(t, "configuration parsing and validation are Go")
	for _, tc := range []struct {
		timeout string
		want    time.Duration
		err     string
	}{
		{`"10m"`, 10 * time.Minute, ""},
		{`""`, 0, ""},
		{`"25h"`, 0, "up to 24h0m0s"},
		{`"1.5ms"`, 0, "whole milliseconds"},
		{`"-1s"`, 0, "want 0 (off)"},
		{`"soon"`, 0, "affinity_timeout"},
	} {
		c := lbconf.Config{Cgroup: "edge", ReverseSize: 64, Service: []lbconf.ServiceConfig{{VIP: "198.18.1.1", Port: 80,
			Backends: []string{"198.18.2.1:80"}, AffinityTimeout: tc.timeout[1 : len(tc.timeout)-1]}}}
		svcs, err := c.Services()
		if tc.err != "" {
			if assert.Error(t, err, "affinity_timeout = %s", tc.timeout) {
				assert.Contains(t, err.Error(), tc.err)
			}
			continue
		}
		require.NoError(t, err, "affinity_timeout = %s", tc.timeout)
		assert.Equal(t, tc.want, svcs[0].Affinity, "affinity_timeout = %s", tc.timeout)
	}
}
