package shield

import (
	"context"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/shield/tick"
)

// walkChunk is how many sets a walk reads between checks of its context.
const walkChunk = 4096

// WalkStats describes one walk of the sources table.
type WalkStats struct {
	Scanned int // entries read
}

// Top returns up to n tracked sources (1 <= n <= MaxTop) with the most
// packets dropped or passed, highest first, ties broken by address. Sources
// whose count is zero are left out. Limited is computed as of now (see
// Source). The mapped table is read into a bounded min-heap of n entries,
// so memory is O(n) whatever the table holds; ctx ends the walk early with
// its error.
func (s *Shield) Top(ctx context.Context, n int, by source.TopOrder) ([]source.Source, WalkStats, error) {
	if n < 1 || n > source.MaxTop {
		return nil, WalkStats{}, fmt.Errorf("top n %d out of range [1, %d]", n, source.MaxTop)
	}
	score := func(v *bpf.ShieldSource) uint64 { return v.Dropped }
	if by == source.ByPassed {
		score = func(v *bpf.ShieldSource) uint64 { return v.Passed }
	}
	r := source.NewRanking(n, by)
	limited := s.limitedNow()
	pl := s.Limits()
	stats, err := s.walkSources(ctx, func(k *bpf.ShieldSrcKey, v *bpf.ShieldSource) {
		if sc := score(v); sc != 0 && r.Admits(sc) {
			r.Offer(source.Of(*k, *v, limited, pl))
		}
	})
	if err != nil {
		return nil, stats, err
	}
	return r.Sorted(), stats, nil
}

// limitedNow returns limitedAt for the source limits in force and the
// program's clock as it reads now (a bucket is judged as stored when the
// clock cannot be read).
func (s *Shield) limitedNow() func(*bpf.ShieldBucket) bool {
	l := s.Limits()
	lim := config.BucketLimit(l.Rate, l.Burst)
	now, err := s.ClockNow()
	if err != nil {
		now = 0 // no refill
	}
	return func(b *bpf.ShieldBucket) bool { return source.LimitedAt(b, lim, now) }
}

// ClockNow reads the program's clock, in nanoseconds, as the program reads
// it: through clock_probe (one BPF_PROG_TEST_RUN) for jiffies and ktime. A
// test of real-time rates measures its intervals with it: a guest starved
// of its CPU sees its jiffies lag the wall clock, and the program refills
// by the jiffies.
func (s *Shield) ClockNow() (uint64, error) { return s.clockRead(s.clock) }

// clockRead reads clock c as the program would read it.
func (s *Shield) clockRead(c config.Clock) (uint64, error) {
	if c == config.ClockVirtual {
		var v uint64
		if err := s.objs.VirtualNowNs.Get(&v); err != nil {
			return 0, fmt.Errorf("read virtual clock: %w", err)
		}
		return v, nil
	}
	if _, err := s.objs.ClockProbe.Run(&ebpf.RunOptions{Data: make([]byte, 64)}); err != nil {
		return 0, fmt.Errorf("run clock probe: %w", err)
	}
	var j, k uint64
	if c == config.ClockKtime {
		if err := s.objs.ProbeKtimeNs.Get(&k); err != nil {
			return 0, fmt.Errorf("read probe: %w", err)
		}
		return k, nil
	}
	if err := s.objs.ProbeJiffies.Get(&j); err != nil {
		return 0, fmt.Errorf("read probe: %w", err)
	}
	// The program's ns_per_jiffy is only set when it runs on jiffies.
	nsPerJiffy, err := tick.Jiffy()
	if err != nil {
		return 0, err
	}
	return j * nsPerJiffy, nil
}

// CountSources counts the tracked sources with the same walk as Top.
func (s *Shield) CountSources(ctx context.Context) (int, error) {
	st, err := s.walkSources(ctx, func(*bpf.ShieldSrcKey, *bpf.ShieldSource) {})
	return st.Scanned, err
}

// walkSources calls fn for every source of the table, read through its
// mapping (no system call, no copy but the one of each used way; ctx is
// checked every walkChunk sets). The program writes the table during the
// walk: a source may be missed, seen in the state before or after a
// packet, or seen in a way being replaced (a torn entry is a source no
// packet carries, with some fresh counts).
func (s *Shield) walkSources(ctx context.Context, fn func(*bpf.ShieldSrcKey, *bpf.ShieldSource)) (WalkStats, error) {
	var st WalkStats
	sets, release, err := s.readTable()
	if err != nil {
		return st, fmt.Errorf("walk sources: %w", err)
	}
	defer release()
	var scratch bpf.ShieldSource
	for i := range sets {
		if i%walkChunk == 0 {
			if err := ctx.Err(); err != nil {
				return st, fmt.Errorf("walk sources: %w", err)
			}
		}
		st.Scanned += source.VisitSet(&sets[i], &scratch, fn)
	}
	return st, nil
}
