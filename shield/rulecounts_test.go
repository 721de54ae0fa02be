package shield

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/oldpins"
	"github.com/xdpshield/xdpshield/sim"
)

// onCPU runs fn on a thread pinned to cpu; the thread ends with it.
func onCPU(t *testing.T, cpu int, fn func() error) {
	t.Helper()
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the pinned thread exits
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	require.NoError(t, <-errc, "on CPU %d", cpu)
}

// TestRuleCountsPerCPU: the entry that decided a packet counts it in the
// region of the CPU the program ran on (rule_counts[cpu*MAX_RULES+rule]),
// apart from the other CPUs', and ListHits sums the regions.
func TestRuleCountsPerCPU(t *testing.T) {
	s := loadT(t, Options{})
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		t.Skipf("the test may run on CPUs %v only: no second region to count in", cpus)
	}
	p := netip.MustParsePrefix("198.18.5.0/24")
	_, err := s.Add(lists.DenyList, []netip.Prefix{p})
	require.NoError(t, err)
	rule := (*s.rules.Load())[p]
	require.Less(t, rule, maxRules, "the entry's rule")
	frame := sim.From("198.18.5.5", sim.UDP).Bytes()
	first, last := cpus[0], cpus[len(cpus)-1]
	sent := map[int]int{first: 2, last: 3}
	for cpu, n := range sent {
		onCPU(t, cpu, func() error {
			for range n {
				if got, err := sim.Run(s.Program(), frame); err != nil || got != sim.Drop {
					return fmt.Errorf("run: %v, %v; want a drop", got, err)
				}
			}
			return nil
		})
	}
	for cpu, n := range sent {
		assert.EqualValues(t, n, s.hits.counts[cpu*int(maxRules)+int(rule)], "CPU %d's count of rule %d", cpu, rule)
	}
	hits, err := s.ListHits(lists.DenyList)
	require.NoError(t, err)
	assert.Equal(t, map[netip.Prefix]uint64{p: 5}, hits, "ListHits(deny)")
}

// TestRuleHitsCarriedFromOldPins: pins of a version before rule_counts
// hold the entries' hit counters in a per-CPU array, rule_hits (one
// counter per rule). A load on them carries the counts of the entries in
// force over, in place of what this version's counters held for them,
// and unpins the old counters.
func TestRuleHitsCarriedFromOldPins(t *testing.T) {
	dir := pinDir(t)
	s, err := Load(Options{PinPath: dir, TableSize: 4096})
	require.NoError(t, err, "fresh Load")
	p := netip.MustParsePrefix("198.18.5.0/24")
	_, err = s.Add(lists.DenyList, []netip.Prefix{p})
	require.NoError(t, err)
	rule := (*s.rules.Load())[p]
	s.Close()

	// rule_hits as bpf/shield.c declared it before rule_counts.
	cpus, err := ebpf.PossibleCPU()
	require.NoError(t, err)
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: oldpins.RuleHitsPin, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: maxRules})
	require.NoError(t, err, "create the old rule_hits")
	per := make([]uint64, cpus)
	per[0] = 5
	per[cpus-1] += 7
	require.NoError(t, old.Put(rule, per))
	require.NoError(t, old.Put(rule+1, make([]uint64, cpus))) // no entry's
	require.NoError(t, old.Pin(filepath.Join(dir, oldpins.RuleHitsPin)))
	old.Close()
	// A count of the rule in this version's counters (an upgrade after
	// a downgrade that gave the rule out again): the carried count
	// replaces it on every CPU.
	cur, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.ShieldMapRuleCounts), nil)
	require.NoError(t, err)
	require.NoError(t, cur.Put(uint32(cpus-1)*maxRules+rule, uint64(100)))
	cur.Close()

	s = loadT(t, Options{PinPath: dir})
	hits, err := s.ListHits(lists.DenyList)
	require.NoError(t, err)
	assert.Equal(t, map[netip.Prefix]uint64{p: 12}, hits, "ListHits(deny) after the load")
	_, err = os.Stat(filepath.Join(dir, oldpins.RuleHitsPin))
	assert.ErrorIs(t, err, os.ErrNotExist, "the old counters' pin after the load")
}

// TestListHitsDuringClose: the API may still sum hits when the service
// closes the shield (an HTTP handler outliving the shutdown): Close waits
// for the sum and unmaps the counters after it, and a sum after Close is
// an error, not a read of unmapped memory.
func TestListHitsDuringClose(t *testing.T) {
	testutil.Root(t)
	s, err := Load(Options{TableSize: 4096})
	require.NoError(t, err)
	var ps []netip.Prefix
	for i := range 1000 {
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32))
	}
	_, err = s.Add(lists.DenyList, ps)
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		for {
			if _, err := s.ListHits(lists.DenyList); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, s.Close())
	assert.Error(t, <-done, "ListHits after Close")
}
