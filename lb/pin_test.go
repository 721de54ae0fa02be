package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/lb/lbconf"
	"github.com/xdpshield/xdpshield/lb/lbpin"
)

// pinRoot is a fresh directory on the bpffs of /sys/fs/bpf (mounted when
// nothing is), removed when t ends with what the balancer pinned in it.
func pinRoot(t *testing.T) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		require.NoError(t, unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"), "mount bpffs")
	}
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-lbpin-%d", os.Getpid()))
	require.NoError(t, os.Mkdir(dir, 0o700))
	t.Cleanup(func() {
		for _, d := range []string{lbpin.Subdir, lbpin.StagingSubdir} {
			assert.NoError(t, lbpin.Remove(filepath.Join(dir, d)), "cleanup")
		}
		assert.NoError(t, os.Remove(dir), "cleanup")
	})
	return dir
}

// TestPinnedRestart: a pinned balancer keeps translating while no process
// holds it; a restart adopts it (a socket connected before still sees the
// VIP, a backend drained before stays drained, one no longer configured is
// gone); one attached to another cgroup, incomplete, or of another map
// layout is refused with nothing changed;
// RemovePins takes it away.
func TestPinnedRestart(t *testing.T) {
	e := newEnv(t, 3)
	require.NoError(t, e.lb.Detach())
	pins := pinRoot(t)
	bes := backendAddrs(false, 3)
	vip := netip.AddrPortFrom(vip4, 80)
	cfg := lbconf.DefaultConfig()
	cfg.Cgroup = e.cgroup
	svc := func(bs ...netip.AddrPort) []lbconf.ServiceConfig {
		var ss []string
		for _, b := range bs {
			ss = append(ss, b.String())
		}
		return []lbconf.ServiceConfig{{VIP: vip4.String(), Port: 80, Mode: "maglev", Backends: ss}}
	}
	cfg.Service = svc(bes...)

	s1, err := StartPinned(cfg, pins)
	require.NoError(t, err)
	lbDir := filepath.Join(pins, lbpin.Subdir)
	assert.False(t, s1.Adopted || s1.PinDir != lbDir || !lbpin.Pinned(pins), "first StartPinned: adopted %v, pin dir %q (pinned %v); want a fresh balancer pinned in %s", s1.Adopted, s1.PinDir, lbpin.Pinned(pins), lbDir)
	if _, err := os.Stat(filepath.Join(pins, lbpin.StagingSubdir)); !errors.Is(err, os.ErrNotExist) {
		assert.Fail(t, fmt.Sprintf("staging directory after a start: %v, want it renamed away", err))
	}
	before, err := e.dial(vip, netip.AddrPort{})
	require.NoError(t, err)
	defer before.Close()
	if r, err := before.ask(); err != nil || r.kind != "B" {
		require.FailNow(t, fmt.Sprintf("connect before the restart: %+v, %v; want a backend", r, err))
	}
	require.NoError(t, s1.DrainBackends(vip4Key(), bes[:1]))
	// serve stops: this process lets go of every handle.
	require.NoError(t, s1.Close())

	for i := range 5 {
		r, err := e.ask1(vip, netip.AddrPort{})
		require.False(t, err != nil || r.kind != "B" || r.local == bes[0], "connect %d while nothing holds the balancer: %+v, %v; want an active backend (D is the untranslated VIP)", i, r, err)
	}
	if p, err := before.peer(); err != nil || p != vip {
		assert.Fail(t, fmt.Sprintf("getpeername while nothing holds the balancer = %v, %v; want the VIP %v", p, err, vip))
	}

	// Restart with bes[2] no longer configured.
	cfg.Service = svc(bes[0], bes[1])
	s2, err := StartPinned(cfg, pins)
	require.NoError(t, err)
	defer s2.Close()
	assert.True(t, s2.Adopted, "second StartPinned did not adopt the pinned balancer")
	got, _ := s2.Service(vip4Key())
	want := []lbconf.Backend{{Addr: bes[0], Draining: true, Weight: lbconf.DefaultWeight}, {Addr: bes[1], Weight: lbconf.DefaultWeight}}
	assert.False(t, len(got.Backends) != 2 || got.Backends[0] != want[0] || got.Backends[1] != want[1], "after the restart: backends %v, want %v", got.Backends, want)
	if p, err := before.peer(); err != nil || p != vip {
		assert.Fail(t, fmt.Sprintf("getpeername after the restart on a socket connected before = %v, %v; want the VIP %v", p, err, vip))
	}
	if r, err := before.ask(); err != nil || r.kind != "B" {
		assert.Fail(t, fmt.Sprintf("socket connected before the restart: %+v, %v; want its backend still", r, err))
	}
	for i := range 20 {
		r, err := e.ask1(vip, netip.AddrPort{})
		require.False(t, err != nil || r.kind != "B" || r.local != bes[1], "connect %d after the restart: %+v, %v; want %v (%v draining, %v removed)", i, r, err, bes[1], bes[0], bes[2])
	}
	s2.Close()

	// Another cgroup: refused, the pinned balancer untouched.
	other := cfg
	other.Cgroup = e.sibling
	if s, err := StartPinned(other, pins); err == nil || !strings.Contains(err.Error(), "attached to cgroup id") {
		assert.Fail(t, fmt.Sprintf("StartPinned in another cgroup = %v, %v; want a refusal naming the cgroup", s, err))
		s.Close()
	}
	if r, err := e.ask1(vip, netip.AddrPort{}); err != nil || r.local != bes[1] {
		assert.Fail(t, fmt.Sprintf("after the refused start: %+v, %v; want the pinned balancer still translating to %v", r, err, bes[1]))
	}

	// Incomplete (a map pin gone): refused, the links still translating.
	require.NoError(t, os.Remove(filepath.Join(lbDir, "counters")))
	if s, err := StartPinned(cfg, pins); err == nil || !strings.Contains(err.Error(), "incomplete (no counters)") {
		assert.Fail(t, fmt.Sprintf("StartPinned over an incomplete pin directory = %v, %v; want a refusal naming what is missing", s, err))
		s.Close()
	}
	if _, err := os.Stat(filepath.Join(lbDir, "counters")); !errors.Is(err, os.ErrNotExist) {
		assert.Fail(t, fmt.Sprintf("the refused start pinned counters anew: %v", err))
	}
	if r, err := e.ask1(vip, netip.AddrPort{}); err != nil || r.local != bes[1] {
		assert.Fail(t, fmt.Sprintf("after the refused start: %+v, %v; want the pinned balancer still translating to %v", r, err, bes[1]))
	}

	// An older layout: a counters map of another shape. Refused.
	bogus, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 1})
	require.NoError(t, err)
	defer bogus.Close()
	require.NoError(t, bogus.Pin(filepath.Join(lbDir, "counters")))
	if s, err := StartPinned(cfg, pins); err == nil || !strings.Contains(err.Error(), "incompatible version of the balancer") {
		assert.Fail(t, fmt.Sprintf("StartPinned over maps of another layout = %v, %v; want a refusal", s, err))
		s.Close()
	}
	if r, err := e.ask1(vip, netip.AddrPort{}); err != nil || r.local != bes[1] {
		assert.Fail(t, fmt.Sprintf("after the refused start: %+v, %v; want the pinned balancer still translating to %v", r, err, bes[1]))
	}

	if err := lbpin.Remove(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") {
		assert.Fail(t, fmt.Sprintf("lbpin.Remove(not bpffs) = %v, want a refusal", err))
	}
	require.NoError(t, lbpin.Remove(lbDir))
	assert.False(t, lbpin.Pinned(pins), "%s still there after RemovePins", lbDir)
	if r, err := e.ask1(vip, netip.AddrPort{}); err != nil || r.kind != "D" {
		assert.Fail(t, fmt.Sprintf("after RemovePins: %+v, %v; want the untranslated VIP (decoy D)", r, err))
	}
}

func vip4Key() lbconf.ServiceKey { return lbconf.ServiceKey{VIP: vip4, Port: 80, Proto: lbconf.TCP} }
