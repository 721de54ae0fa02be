package shield

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/ownaddr"
	"github.com/xdpshield/xdpshield/shield/tick"
)

// The tests of this file are named after the findings of issue 9 that live
// in the loader and the pinned state.

// pinDir is a fresh pin directory on bpffs, removed when t ends.
func pinDir(t *testing.T) string {
	t.Helper()
	testutil.Root(t)
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid()))
	require.NoError(t, pinfs.EnsureBPFFS(dir), "EnsureBPFFS")
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestClockRestartDoesNotStall (finding 1): a restart on the same pins with
// another clock must neither stall the drained buckets nor refuse new
// clients: jiffies x ns_per_jiffy runs ~2^32 jiffies ahead of ktime.
func TestClockRestartDoesNotStall(t *testing.T) {
	for _, tc := range []struct{ from, to config.Clock }{
		{config.ClockJiffies, config.ClockKtime},
		{config.ClockKtime, config.ClockJiffies},
	} {
		t.Run(fmt.Sprintf("%s to %s", tc.from, tc.to), func(t *testing.T) {
			// Rate 10/s: a token per 100 ms, so a burst sent on an emulated
			// CPU (the VM matrix) is not refilled while it is sent. After
			// the restart the burst must be back at once: the stall is
			// what the test is about, not the rate.
			dir := pinDir(t)
			l := config.Limits{Rate: 10, Burst: 10, AdmissionRate: 100, AdmissionBurst: 2}
			s, err := Load(Options{TableSize: 1024, Clock: tc.from, PinPath: dir, Limits: l})
			require.NoError(t, err, "Load(%s)", tc.from)
			a := frame4("198.18.0.1")
			for i := range 10 {
				assert.Equal(t, uint32(xdpPass), run(t, s, a), "burst packet %d on %s", i, tc.from)
			}
			assert.Equal(t, uint32(xdpDrop), run(t, s, a), "over burst on %s", tc.from)
			assert.Equal(t, uint32(xdpPass), run(t, s, frame4("198.18.0.2")), "second stranger on %s", tc.from)
			s.Close()

			s, err = Load(Options{TableSize: 1024, Clock: tc.to, PinPath: dir, Limits: l})
			require.NoError(t, err, "Load(%s) on the pins of %s", tc.to, tc.from)
			defer s.Close()
			assert.Contains(t, s.ClockNote(), fmt.Sprintf("clock %s converted to %s", tc.from, tc.to), "ClockNote()")
			time.Sleep(300 * time.Millisecond) // 30 admissions: the admission bucket is full again
			for i := range 10 {
				assert.Equal(t, uint32(xdpPass), run(t, s, a), "burst packet %d on %s after the restart", i, tc.to)
			}
			assert.Equal(t, uint32(xdpPass), run(t, s, frame4("198.18.0.3")), "a stranger after the restart")
			assert.Equal(t, uint32(xdpPass), run(t, s, frame4("198.18.0.4")), "a second stranger after the restart")
		})
	}
}

// TestJiffiesLimitsRefused (finding 2): on the jiffies clock a bucket is
// refilled once per tick, at most to its burst, so the effective rate is
// min(rate, burst x HZ). Limits it cannot honour are refused, naming the
// smallest burst that can: ceil(rate / HZ).
func TestJiffiesLimitsRefused(t *testing.T) {
	testutil.Root(t)
	ns, err := tick.Jiffy()
	require.NoError(t, err, "tick.Jiffy()")
	hz := uint64(1e9) / ns
	bad := config.Limits{Rate: 1_000_000, Burst: 1000, AdmissionRate: 100, AdmissionBurst: 100}
	min := (bad.Rate + hz - 1) / hz
	_, err = Load(Options{TableSize: 1024, Clock: config.ClockJiffies, Limits: bad})
	require.Error(t, err, "Load(jiffies, %+v)", bad)
	assert.True(t, errors.Is(err, config.ErrInvalid), "Load() error %v is not config.ErrInvalid", err)
	assert.Contains(t, err.Error(), fmt.Sprintf("burst %d", min), "Load() error")

	s := loadT(t, Options{Clock: config.ClockJiffies})
	err = s.SetLimits(config.Limits{Rate: 1000, Burst: 1, AdmissionRate: 100, AdmissionBurst: 100})
	require.Error(t, err, "SetLimits(rate 1000, burst 1) on jiffies")
	assert.Contains(t, err.Error(), fmt.Sprintf("burst %d", (1000+hz-1)/hz), "SetLimits() error")
	assert.True(t, errors.Is(err, config.ErrInvalid), "SetLimits() error %v is not config.ErrInvalid", err)
	err = s.SetLimits(config.Limits{Rate: 1000, Burst: 1, AdmissionRate: 1_000_000, AdmissionBurst: 10})
	require.Error(t, err, "SetLimits(admission 1e6/10) on jiffies")
	assert.Contains(t, err.Error(), "admission_burst", "SetLimits() error")

	k := loadT(t, Options{Clock: config.ClockKtime})
	assert.NoError(t, k.SetLimits(bad), "SetLimits(%+v) on ktime", bad)

	// Pinned limits set on ktime are refused by a restart on jiffies.
	dir := pinDir(t)
	p, err := Load(Options{TableSize: 1024, Clock: config.ClockKtime, PinPath: dir, Limits: bad})
	require.NoError(t, err, "Load(ktime, %+v)", bad)
	p.Close()
	p, err = Load(Options{TableSize: 1024, Clock: config.ClockJiffies, PinPath: dir, Limits: config.Limits{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1}})
	if err == nil {
		p.Close()
	}
	require.Error(t, err, "Load(jiffies) on pins holding %+v = nil error", bad)
	assert.Contains(t, err.Error(), fmt.Sprintf("pinned limits: burst 1000 is below ceil(rate / HZ) = ceil(1000000 / %d)", hz), "Load(jiffies) on pinned ktime limits")
	assert.Contains(t, err.Error(), fmt.Sprintf("burst %d or more", min), "Load(jiffies) on pinned ktime limits")
}

// TestPreviousConfigMapKept (finding 7): before Linux 6.7 an inner map
// removed from an array of maps could be freed while a program running on
// another CPU still read it. The loader keeps the inner map it replaced open
// until the next swap, so it outlives every program that looked it up.
func TestPreviousConfigMapKept(t *testing.T) {
	s := loadT(t, Options{Clock: config.ClockVirtual})
	current := func() ebpf.MapID {
		var id ebpf.MapID
		require.NoError(t, s.objs.ConfigMap.Lookup(uint32(0), &id), "config slot")
		return id
	}
	alive := func(id ebpf.MapID) bool {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			return false
		}
		m.Close()
		return true
	}
	// gone waits for the kernel's deferred free of an unreferenced map.
	gone := func(id ebpf.MapID) bool {
		for range 100 {
			if !alive(id) {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	l := s.Limits()
	first := current()
	l.Rate++
	require.NoError(t, s.SetLimits(l))
	second := current()
	require.NotEqual(t, first, second, "SetLimits() swapped no map in")
	time.Sleep(200 * time.Millisecond)
	assert.True(t, alive(first), "the replaced config map %d was freed at once", first)
	l.Rate++
	require.NoError(t, s.SetLimits(l))
	assert.True(t, gone(first), "the config map %d two swaps back is never freed", first)
	assert.True(t, alive(second), "the config map %d one swap back was freed", second)
}

// TestListChangeReports: Add and Remove say what they changed, so callers
// need not diff the list around them.
func TestListChangeReports(t *testing.T) {
	s := loadT(t, Options{Clock: config.ClockVirtual})
	ps := func(ss ...string) []netip.Prefix {
		out, err := lists.ParsePrefixes(ss)
		require.NoError(t, err)
		return out
	}
	_, err := s.Add(lists.DenyList, ps("198.18.0.0/24"))
	require.NoError(t, err)
	ch, err := s.Add(lists.DenyList, ps("2001:db8::/48", "198.18.0.0/24", "198.18.1.0/24"))
	require.NoError(t, err)
	assert.Equal(t, lists.ListChange{List: lists.DenyList, Added: ps("198.18.1.0/24", "2001:db8::/48"), Before: 1,
		After: ps("198.18.0.0/24", "198.18.1.0/24", "2001:db8::/48")}, ch, "Add()")
	ch, err = s.Remove(lists.DenyList, ps("2001:db8::/48", "198.18.0.0/24", "198.18.0.0/24"))
	require.NoError(t, err)
	assert.Equal(t, lists.ListChange{List: lists.DenyList, Removed: ps("198.18.0.0/24", "2001:db8::/48"), Before: 3,
		After: ps("198.18.1.0/24")}, ch, "Remove()")
}

// TestOwnAddressesFollowNetlink: ownaddr.Watch marks the namespace's addresses
// as own at once and follows addresses added and removed later.
func TestOwnAddressesFollowNetlink(t *testing.T) {
	testutil.Root(t)
	s := loadT(t, Options{Clock: config.ClockVirtual})
	ns, err := topo.New("own")
	require.NoError(t, err, "topo.New")
	t.Cleanup(func() { ns.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, ns.Do(func() error { return ownaddr.Watch(ctx, s, nil) }), "ownaddr.Watch")
	has := func(a string) bool {
		own, err := s.Own()
		require.NoError(t, err, "Own()")
		return slices.Contains(own, netip.MustParseAddr(a))
	}
	assert.True(t, has("127.0.0.1"), "own addresses at start lack 127.0.0.1")
	require.NoError(t, ns.AddAddr("lo", "198.18.9.1/32"))
	assert.Eventually(t, func() bool { return has("198.18.9.1") }, 5*time.Second, 20*time.Millisecond, "an added address becomes own")
	assert.Equal(t, uint32(xdpDrop), run(t, s, frame4("198.18.9.1")), "a frame from the new own address")
	out, err := ns.Command("ip", "addr", "del", "198.18.9.1/32", "dev", "lo").CombinedOutput()
	require.NoError(t, err, "ip addr del: %s", out)
	assert.Eventually(t, func() bool { return !has("198.18.9.1") }, 5*time.Second, 20*time.Millisecond, "a removed address stops being own")
}
