package datapath

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/sim"
)

// hammer runs frame repeat times through prog on each of cpus at once: one
// goroutine per CPU, locked to its thread and pinned with sched_setaffinity,
// released together.
func hammer(t *testing.T, prog *ebpf.Program, frame []byte, cpus []int, repeat uint32) {
	t.Helper()
	sim.Hold(prog)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, len(cpus))
	for i, cpu := range cpus {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs[i] = fmt.Errorf("pin to CPU %d: %w", cpu, err)
				ready.Done()
				return
			}
			ready.Done()
			<-start
			// Repeat is a lower bound (an interrupted run restarts), so the
			// verdicts are read from the counters, not derived from it.
			if _, err := prog.Run(&ebpf.RunOptions{Data: frame, Repeat: repeat}); err != nil {
				errs[i] = fmt.Errorf("test run on CPU %d: %w", cpu, err)
			}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// TestConcurrentAccuracy: two CPUs hammer one source with the virtual clock
// frozen. The stated accuracy (bpf/shield.c, take()): a drain of a bucket
// holding burst packets passes at most burst + (CPUs - 1), and the overshoot
// is a debt the next refill repays, so over any number of drains the total
// passed is within [drains*burst, drains*burst + CPUs - 1]. Each round moves
// the clock past a full refill, then both CPUs hammer. "one refill" takes
// the round's refill with a packet from one CPU first; "racing refills"
// lets both CPUs' first packets race for it, which the cmpxchg refill makes
// safe (shield_compat, for kernels before 5.12, does not: see refill()).
func TestConcurrentAccuracy(t *testing.T) {
	testutil.Root(t)
	cpus := []int{0, 1}
	if runtime.NumCPU() < len(cpus) {
		// A machine property, not a missing privilege or kernel feature:
		// a one-CPU VM of the kernel matrix skips even under
		// SHIELD_REQUIRE_PRIV.
		t.Skipf("needs %d CPUs, have %d", len(cpus), runtime.NumCPU())
	}
	for _, tc := range []struct {
		name  string
		prime bool
	}{
		{"one refill", true},
		{"racing refills", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const burst = 100_000
			const rounds = 20
			const repeat = 150_000
			l := config.Limits{Rate: 1, Burst: burst, AdmissionRate: 10, AdmissionBurst: 10}
			s := load(t, 4096, l)
			if !tc.prime && s.Compat() {
				t.Skip("shield_compat (no BPF_CMPXCHG) does not claim refills: stated, not tested")
			}
			frame := sim.From("198.18.0.1", sim.UDP).Bytes()
			at := 10 * sec
			require.NoError(t, s.SetTime(uint64(at)))
			got, err := sim.Run(s.Program(), frame) // admitted; the rounds refill it to burst
			require.NoError(t, err)
			require.Equal(t, sim.Pass, got, "first packet")

			bound := uint64(burst + len(cpus) - 1)
			var worst, debt, total uint64
			extra, shared := 0, 0
			for r := range rounds {
				// Past a full refill (burst/rate seconds): the bucket holds
				// burst less any debt when the round's first packet reads
				// the clock.
				at += burst * sec
				require.NoError(t, s.SetTime(uint64(at)))
				before, err := s.Counters()
				require.NoError(t, err)
				beforeCPU, err := s.CountersByCPU()
				require.NoError(t, err)
				if tc.prime {
					got, err := sim.Run(s.Program(), frame)
					require.NoError(t, err)
					require.Equal(t, sim.Pass, got, "round %d: first packet after a full refill", r)
				}
				hammer(t, s.Program(), frame, cpus, repeat)
				after, err := s.Counters()
				require.NoError(t, err)
				afterCPU, err := s.CountersByCPU()
				require.NoError(t, err)
				both := true
				for _, cpu := range cpus {
					if afterCPU[cpu].Sub(beforeCPU[cpu])[counter.Pass][counter.ReasonOK][counter.ProtoUDP] == 0 {
						both = false
					}
				}
				if both {
					shared++
				}
				d := after.Sub(before)
				passed := d[counter.Pass][counter.ReasonOK][counter.ProtoUDP]
				dropped := d[counter.Drop][counter.ReasonLimit][counter.ProtoUDP]
				require.GreaterOrEqual(t, passed+dropped, uint64(len(cpus))*repeat, "round %d: packets counted", r)
				require.Equal(t, passed+dropped, d.Total(), "round %d: every packet is ok or limit", r)
				// A round starts owing what the previous one overshot.
				assert.GreaterOrEqual(t, passed+debt, uint64(burst), "round %d: passed + debt (%d)", r, debt)
				assert.LessOrEqual(t, passed+debt, bound, "round %d: passed + debt (%d), want <= burst + CPUs - 1 = %d", r, debt, bound)
				if passed+debt >= burst {
					debt = passed + debt - burst
				}
				total += passed
				worst = max(worst, passed)
				if passed > burst {
					extra++
				}
			}
			// Both CPUs must have taken part in draining the bucket, or the
			// test proves nothing about concurrency.
			assert.NotZero(t, shared, "rounds in which every CPU passed packets")
			assert.GreaterOrEqual(t, total, uint64(rounds*burst), "passed over all rounds")
			assert.LessOrEqual(t, total, uint64(rounds*burst+len(cpus)-1), "passed over all rounds")
			t.Logf("%d rounds of %d CPUs x %d packets, burst %d: %d rounds drained by every CPU; worst round passed %d (bound %d); %d rounds passed more than burst; total %d (bound [%d, %d])",
				rounds, len(cpus), repeat, burst, shared, worst, bound, extra, total, rounds*burst, rounds*burst+len(cpus)-1)
		})
	}
}
