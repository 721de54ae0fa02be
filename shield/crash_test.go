package shield

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/oldpins"
)

// crashChildEnv makes the test binary the child of TestKillMidListChange:
// it loads the shield on the pins named and removes the prefixes.
const crashChildEnv = "SHIELD_TEST_LIST_CRASH_CHILD"

// crashRemoved are the host prefixes the crash test lists and then removes
// (198.18.0.0/15, the benchmarking range, RFC 2544).
func crashRemoved(n int) []netip.Prefix {
	out := make([]netip.Prefix, n)
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		out[i] = netip.PrefixFrom(a, 32)
	}
	return out
}

// crashKept stays on the deny list, so the list never empties (an empty
// list turns its lookup off with one flag: that would hide a mix).
var crashKept = netip.MustParsePrefix("198.19.200.1/32")

// crashN is the 30,000 removals; -short (the VM matrix, under
// emulation, where 30,000 took 196 s on 5.10) removes 3,000.
func crashN() int {
	if testing.Short() {
		return 3000
	}
	return 30000
}

// TestKillMidListChange (issue 23, finding 8): a kill -9 of the process
// making a list change, at the moment the change starts to show in the
// data plane, leaves the old lists or the new ones in force, never a mix.
// The parent lists 30,001 deny prefixes on pins; a child process loads on
// the same pins and removes 30,000 of them in one change (the DELETE of
// the issue); the parent runs the program (same pinned maps) on a sample
// of the removed sources in a loop and sends SIGKILL as soon as one of
// them passes, then runs it on all 30,000: all dropped or all passed.
// A load on the pins afterwards lists what is in force.
func TestKillMidListChange(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(t, dir)
		return
	}
	dir := pinDir(t)
	crashN := crashN()
	l := config.DefaultLimits()
	l.DryRun = true // limits pass: only the deny list drops
	s := loadT(t, Options{PinPath: dir, Limits: l, Clock: config.ClockVirtual})
	removed := crashRemoved(crashN)
	_, err := s.Add(lists.DenyList, append(removed, crashKept))
	require.NoError(t, err, "Add")
	frames := make([][]byte, crashN)
	for i, p := range removed {
		frames[i] = frame4(p.Addr().String())
	}
	kept := frame4(crashKept.Addr().String())
	require.Equal(t, uint32(xdpDrop), run(t, s, frames[0]), "a listed source before the change")

	cmd := exec.Command(os.Args[0], "-test.run=^TestKillMidListChange$", "-test.count=1", fmt.Sprintf("-test.short=%v", testing.Short()))
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "changing" {
				done <- nil
				break
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "the child did not start its change")
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		require.FailNow(t, "the child did not start its change within 60 s")
	}
	// Kill at the first sign of the change in the data plane.
	deadline := time.Now().Add(60 * time.Second)
	polls := 0
	for {
		seen := false
		for i := 0; i < crashN; i += crashN / 64 {
			if run(t, s, frames[i]) == xdpPass {
				seen = true
				break
			}
		}
		polls++
		if seen || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, cmd.Process.Kill(), "kill -9 the child")
	<-done
	require.False(t, time.Now().After(deadline), "the change never showed in the data plane within 60 s")

	passed := 0
	for _, f := range frames {
		if run(t, s, f) == xdpPass {
			passed++
		}
	}
	t.Logf("killed after %d polls; %d of %d removals in force", polls, passed, crashN)
	assert.Equal(t, crashN, passed, "removals in force after a kill -9 once the change showed (all or none)")
	assert.Equal(t, uint32(xdpDrop), run(t, s, kept), "the prefix the change kept")

	// A restart on the pins lists what was in force, with nothing to roll
	// back.
	s.Close()
	s2 := loadT(t, Options{PinPath: dir, Limits: l, Clock: config.ClockVirtual})
	deny, err := s2.List(lists.DenyList)
	require.NoError(t, err)
	assert.Equal(t, 1, len(deny), "prefixes on the deny list after the restart")
	assert.Contains(t, deny, crashKept, "the deny list after the restart")
	for _, i := range []int{0, crashN / 2, crashN - 1} {
		assert.Equal(t, uint32(xdpPass), run(t, s2, frames[i]), "removed source %d after the restart", i)
	}
	assert.Equal(t, uint32(xdpDrop), run(t, s2, kept), "the kept prefix after the restart")
}

// crashChild is the process TestKillMidListChange kills: it removes the
// 30,000 prefixes in one change, then waits to be killed.
func crashChild(t *testing.T, dir string) {
	l := config.DefaultLimits()
	l.DryRun = true
	s, err := Load(Options{PinPath: dir, Limits: l, Clock: config.ClockVirtual, TableSize: 4096})
	require.NoError(t, err, "child Load")
	fmt.Println("changing")
	_, err = s.Remove(lists.DenyList, crashRemoved(crashN()))
	require.NoError(t, err, "child Remove")
	time.Sleep(time.Minute)
}

// TestMigrateOldListPins: pins of a version before the verdict
// generations keep the lists in tries of their own (allow4 ... deny6) and
// an interrupted change in "journal". A load on them lists what those
// tries hold with the interrupted change rolled back, puts it in force
// and unpins the old tries and the journal.
func TestMigrateOldListPins(t *testing.T) {
	dir := pinDir(t)
	l := config.DefaultLimits()
	l.DryRun = true
	s, err := Load(Options{PinPath: dir, Limits: l, Clock: config.ClockVirtual, TableSize: 4096})
	require.NoError(t, err, "fresh Load")
	s.Close()

	pin := func(name string, spec ebpf.MapSpec, put func(m *ebpf.Map)) {
		m, err := ebpf.NewMap(&spec)
		require.NoError(t, err, "create the old %s", name)
		defer m.Close()
		put(m)
		require.NoError(t, m.Pin(filepath.Join(dir, name)))
	}
	lpm := func(keySize uint32) ebpf.MapSpec {
		return ebpf.MapSpec{Type: ebpf.LPMTrie, KeySize: keySize, ValueSize: 1, MaxEntries: 65536, Flags: 1}
	}
	kept, interrupted := netip.MustParsePrefix("198.18.1.0/24"), netip.MustParsePrefix("198.18.2.0/24")
	allowed := netip.MustParsePrefix("2001:db8::/32")
	pin("deny4", lpm(8), func(m *ebpf.Map) {
		for _, p := range []netip.Prefix{kept, interrupted} {
			require.NoError(t, m.Put(bpf.ShieldLpm4Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As4()}, uint8(1)))
		}
	})
	pin("allow6", lpm(20), func(m *ebpf.Map) {
		require.NoError(t, m.Put(bpf.ShieldLpm6Key{Prefixlen: 32, Addr: allowed.Addr().As16()}, uint8(1)))
	})
	pin("allow4", lpm(8), func(*ebpf.Map) {})
	pin("deny6", lpm(20), func(*ebpf.Map) {})
	// main's verdict trie: a one-byte value (no hit counter), made afresh.
	require.NoError(t, os.Remove(filepath.Join(dir, bpf.ShieldMapLists4)))
	pin(bpf.ShieldMapLists4, ebpf.MapSpec{Type: ebpf.LPMTrie, KeySize: 8, ValueSize: 1, MaxEntries: 2*65536 + 4096, Flags: 1}, func(m *ebpf.Map) {
		require.NoError(t, m.Put(bpf.ShieldLpm4Key{Prefixlen: 24, Addr: kept.Addr().As4()}, uint8(lists.VerdictDeny)))
	})
	pin(oldpins.JournalPin, ebpf.MapSpec{Type: ebpf.Hash, KeySize: 20, ValueSize: 1, MaxEntries: 16}, func(m *ebpf.Map) {
		k := oldpins.JournalKey{List: uint8(lists.DenyList), Bits: 24, Is4: 1, Addr: interrupted.Addr().As16()}
		require.NoError(t, m.Put(k, oldpins.JournalAdded))
	})

	s = loadT(t, Options{PinPath: dir, Limits: l, Clock: config.ClockVirtual})
	deny, err := s.List(lists.DenyList)
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{kept}, deny, "List(deny) after the migration")
	allow, err := s.List(lists.AllowList)
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{allowed}, allow, "List(allow) after the migration")
	r, ok := s.Recovered()
	assert.True(t, ok, "Recovered()")
	assert.Equal(t, 1, r.Added[lists.DenyList], "interrupted additions taken off again")
	assert.Equal(t, uint32(xdpDrop), run(t, s, frame4("198.18.1.5")), "a source on the old deny list")
	assert.Equal(t, uint32(xdpPass), run(t, s, frame4("198.18.2.5")), "a source of the interrupted addition")
	for _, name := range []string{"allow4", "allow6", "deny4", "deny6", oldpins.JournalPin} {
		_, err := os.Stat(filepath.Join(dir, name))
		assert.ErrorIs(t, err, os.ErrNotExist, "the old pin %s after the migration", name)
	}
	s.Close()
	s = loadT(t, Options{PinPath: dir, Limits: l, Clock: config.ClockVirtual})
	deny, err = s.List(lists.DenyList)
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{kept}, deny, "List(deny) on the new pins")
	_, ok = s.Recovered()
	assert.False(t, ok, "Recovered() on the new pins")
}
