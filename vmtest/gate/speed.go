package gate

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// A path the gate times: the object whose base revision it is timed
// against ("shield" or "xdplb", SpeedObjects), and how to load a program
// of that object (from the base's spec, or this tree's when nil) in the
// state that sends its frame down the path.
type speedPath struct {
	name   string
	object string
	load   func(spec *ebpf.CollectionSpec) (*subject, error)
	// ownRun sizes the timed runs from the path's cost (the slower of it
	// and the reference), not the reference's alone: a path many times
	// the reference's cost would otherwise take as many times Run. The
	// shield's paths keep the reference's sizing (their clean runs were
	// measured with it).
	ownRun bool
}

// subject is one program loaded and set up on a path.
type subject struct {
	prog    *ebpf.Program // what is timed
	frame   []byte
	reprime func() error // between timed runs; nil: stateless
	// tally reads the counters: the packets that took the path, and all.
	tally func() (on, all uint64, err error)
	what  string // the path's counter, for the error
	close func()
	// beside, when set, loads the base's program (spec) to run on this
	// one's maps and state, instead of a second load of the path.
	beside func(spec *ebpf.CollectionSpec) (*subject, error)
}

// speedPaths are the shield's paths, then the balancer's.
var speedPaths = append(shieldSpeedPaths(), xdplbPaths...)

// A path of the shield: a loaded shield in the state that sends frame down
// the path, and the counter every packet must land in. These are the paths
// of BenchmarkShield in shield/datapath (`make bench`), which keeps its own
// copy.
type shieldPath struct {
	name    string
	clock   config.Clock
	setup   func(s *shield.Shield) (frame []byte, want sim.Action, reason counter.Reason, err error)
	reprime func(s *shield.Shield) error // between timed runs; nil: stateless
}

func shieldSpeedPaths() []speedPath {
	var out []speedPath
	for _, p := range shieldPaths {
		out = append(out, speedPath{name: p.name, object: "shield", load: p.load})
	}
	return out
}

const benchSrc = "198.18.0.1"

var shieldPaths = []shieldPath{
	{name: "allow", clock: config.ClockJiffies, setup: func(s *shield.Shield) ([]byte, sim.Action, counter.Reason, error) {
		return sim.From(benchSrc, sim.UDP).Bytes(), sim.Pass, counter.ReasonAllow, addList(s, lists.AllowList, "198.18.0.0/15")
	}},
	{name: "ok", clock: config.ClockJiffies, setup: okSetup(sim.From(benchSrc, sim.UDP))},
	{name: "ok-ipv6-double-tag", clock: config.ClockJiffies, setup: okSetup(sim.From("2001:db8::1", sim.TCP, sim.Double...))},
	{name: "ok-ktime", clock: config.ClockKtime, setup: okSetup(sim.From(benchSrc, sim.UDP))},
	{name: "limit-drop", clock: config.ClockJiffies, setup: func(s *shield.Shield) ([]byte, sim.Action, counter.Reason, error) {
		if err := s.SetLimits(config.Limits{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1}); err != nil {
			return nil, 0, 0, err
		}
		f := sim.From(benchSrc, sim.UDP).Bytes()
		return f, sim.Drop, counter.ReasonLimit, drain(s, f)
	}, reprime: func(s *shield.Shield) error { return drain(s, sim.From(benchSrc, sim.UDP).Bytes()) }},
	{name: "deny", clock: config.ClockJiffies, setup: func(s *shield.Shield) ([]byte, sim.Action, counter.Reason, error) {
		return sim.From(benchSrc, sim.UDP).Bytes(), sim.Drop, counter.ReasonDeny, addList(s, lists.DenyList, "198.18.0.0/15")
	}},
	// The frozen virtual clock: a real one lets a stranger in once a second.
	{name: "admission-drop", clock: config.ClockVirtual, setup: func(s *shield.Shield) ([]byte, sim.Action, counter.Reason, error) {
		if err := s.SetLimits(config.Limits{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1}); err != nil {
			return nil, 0, 0, err
		}
		if err := s.SetTime(1); err != nil {
			return nil, 0, 0, err
		}
		return sim.From(benchSrc, sim.UDP).Bytes(), sim.Drop, counter.ReasonAdmission, drainAdmission(s)
	}},
	{name: "malformed", clock: config.ClockJiffies, setup: func(s *shield.Shield) ([]byte, sim.Action, counter.Reason, error) {
		f := sim.From(benchSrc, sim.UDP)
		return f.Bytes()[:f.IPEnd()-1], sim.Pass, counter.ReasonMalformed, nil
	}},
}

func okSetup(f sim.Frame) func(s *shield.Shield) ([]byte, sim.Action, counter.Reason, error) {
	return func(s *shield.Shield) ([]byte, sim.Action, counter.Reason, error) {
		if err := s.SetLimits(config.Limits{Rate: 1e9, Burst: 1e9, AdmissionRate: 1, AdmissionBurst: 1}); err != nil {
			return nil, 0, 0, err
		}
		b := f.Bytes()
		if _, err := sim.Run(s.Program(), b); err != nil { // established: a table hit from now on
			return nil, 0, 0, err
		}
		return b, sim.Pass, counter.ReasonOK, nil
	}
}

func addList(s *shield.Shield, l lists.List, cidrs ...string) error {
	ps, err := lists.ParsePrefixes(cidrs)
	if err != nil {
		return err
	}
	_, err = s.Add(l, ps)
	return err
}

// drain sends f until it is dropped: the source's bucket is then empty.
func drain(s *shield.Shield, f []byte) error {
	for range 1000 {
		got, err := sim.Run(s.Program(), f)
		if err != nil {
			return err
		}
		if got == sim.Drop {
			return nil
		}
	}
	return errors.New("drain: still passing after 1000 packets")
}

var strangerN int

// drainAdmission admits fresh strangers until the admission bucket refuses one.
func drainAdmission(s *shield.Shield) error {
	for range 1000 {
		strangerN++
		a := netip.AddrFrom4([4]byte{198, 19, byte(strangerN >> 8), byte(strangerN)})
		got, err := sim.Run(s.Program(), sim.From(a.String(), sim.UDP).Bytes())
		if err != nil {
			return err
		}
		if got == sim.Drop {
			return nil
		}
	}
	return errors.New("drain admission: still admitting after 1000 strangers")
}

// SpeedOptions size the measurement.
type SpeedOptions struct {
	Rounds int           // rounds per path, reference and path interleaved (7)
	Run    time.Duration // target length of one timed test run (2 ms)
	Side   time.Duration // target time per round and side (20 ms)
	// Base holds the base revision's objects by name (SpeedObjects): each
	// path of an object there is then timed against it too, old and new
	// alternating in the same rounds, so the machine's drift moves both
	// alike. An object not there: the reference only.
	Base map[string]*ebpf.CollectionSpec
	// NoBase says, by object name, why no base was timed (the base
	// revision predates the object, or its layout differs): its paths
	// carry it (Path.NoBase).
	NoBase map[string]string
	// Only, when set, times only the paths whose name starts with it.
	Only string
}

func (o *SpeedOptions) defaults() {
	if o.Rounds == 0 {
		o.Rounds = 7
	}
	if o.Run == 0 {
		o.Run = 2 * time.Millisecond
	}
	if o.Side == 0 {
		o.Side = 20 * time.Millisecond
	}
}

// timer measures ns/packet with sub-nanosecond precision.
// BPF_PROG_TEST_RUN reports whole nanoseconds per run (its total divided by
// the repeats, truncated): on a fast host the reference takes 7 ns, so one
// step is 14%. Timing the call from user space does not help on a shared
// machine: the test run yields the CPU when asked (cond_resched), and the
// kernel's timer stops across that, a wall clock does not (measured here: a
// 2.7 ms run took 16-24 ms of wall time). So the kernel's statistics are
// used instead (bpf_stats_enabled, through BPF_ENABLE_STATS, 5.8+): every
// run of a program adds its own sched_clock time to run_time_ns and one to
// run_cnt; the mean over a timed run of `repeat` packets has a resolution
// of 1 ns / repeat. The statistics time the program alone, without the test
// run's per-packet bookkeeping that the kernel's own figure includes, and
// each run pays the two clock reads around it (the reference as much as any
// path), so ratios here are larger than `make bench`'s x-ref; both are kept.
type timer struct{}

// run times repeat runs of frame; it returns the statistics' ns per packet
// and the test run's own whole-nanosecond figure.
func (timer) run(prog *ebpf.Program, frame []byte, repeat int) (stats, testRun float64, err error) {
	before, err := prog.Stats()
	if err != nil {
		return 0, 0, fmt.Errorf("program stats: %w", err)
	}
	_, per, err := prog.Benchmark(frame, repeat, nil)
	if err != nil {
		return 0, 0, err
	}
	after, err := prog.Stats()
	if err != nil {
		return 0, 0, fmt.Errorf("program stats: %w", err)
	}
	n := after.RunCount - before.RunCount
	if n == 0 {
		return 0, 0, errors.New("no runs counted: are statistics enabled (BPF_ENABLE_STATS, 5.8+)?")
	}
	return float64(after.Runtime-before.Runtime) / float64(n), float64(per.Nanoseconds()), nil
}

// Speed times every path against the reference.
func Speed(o SpeedOptions) (map[string]Path, error) {
	o.defaults()
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		return nil, fmt.Errorf("enable run-time statistics: %w", err)
	}
	defer stats.Close()
	ref, err := sim.DropProgram()
	if err != nil {
		return nil, fmt.Errorf("load the reference program: %w", err)
	}
	defer ref.Close()
	out := map[string]Path{}
	for _, p := range speedPaths {
		if !strings.HasPrefix(p.name, o.Only) {
			continue
		}
		r, err := speed(ref, p, o)
		if err != nil {
			r.Error = err.Error()
		}
		r.NoBase = o.NoBase[p.object]
		out[p.name] = r
	}
	return out, nil
}

// side is one program timed on a path: this tree's, or the base's.
type side struct {
	sub *subject
	ns  []float64 // per pair, the statistics' ns/packet
	tr  []float64 // per pair, the test run's own figure
}

func (sd *side) time(t timer, frame []byte, repeat int) error {
	if sd.sub.reprime != nil {
		if err := sd.sub.reprime(); err != nil {
			return err
		}
	}
	a, ta, err := t.run(sd.sub.prog, frame, repeat)
	sd.ns, sd.tr = append(sd.ns, a), append(sd.tr, ta)
	return err
}

// load loads a shield for p (from spec when set) and sends its frame down
// p.
func (p shieldPath) load(spec *ebpf.CollectionSpec) (*subject, error) {
	s, err := shield.Load(shield.Options{TableSize: 65536, Clock: p.clock, Spec: spec})
	if err != nil {
		return nil, err
	}
	frame, want, reason, err := p.setup(s)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("set up %s: %w", p.name, err)
	}
	if got, err := sim.Run(s.Program(), frame); err != nil || got != want {
		s.Close()
		return nil, fmt.Errorf("%s: Run() = %s, %v, want %s", p.name, got, err, want)
	}
	v := counter.Pass
	if want == sim.Drop {
		v = counter.Drop
	}
	sub := &subject{prog: s.Program(), frame: frame, what: fmt.Sprintf("%s/%s", v, reason), close: func() { s.Close() }}
	if p.reprime != nil {
		sub.reprime = func() error { return p.reprime(s) }
	}
	sub.tally = func() (uint64, uint64, error) {
		c, err := s.Counters()
		if err != nil {
			return 0, 0, err
		}
		var on uint64
		for _, x := range c[v][reason] {
			on += x
		}
		return on, c.Total(), nil
	}
	return sub, nil
}

func speed(ref *ebpf.Program, p speedPath, o SpeedOptions) (Path, error) {
	var res Path
	c, err := p.load(nil)
	if err != nil {
		return res, err
	}
	defer c.close()
	frame := c.frame
	cur := &side{sub: c}
	var base *side
	if spec := o.Base[p.object]; spec != nil {
		load := p.load
		if c.beside != nil {
			load = c.beside
		}
		b, err := load(spec)
		if err != nil {
			return res, fmt.Errorf("base object: %w", err)
		}
		defer b.close()
		base = &side{sub: b}
	}
	var t timer
	// Size the timed runs from the reference's cost, or the path's own
	// where it is the dearer (ownRun).
	trial, _, err := t.run(ref, frame, 10000)
	if err != nil {
		return res, err
	}
	if p.ownRun {
		if err := cur.time(t, frame, 10000); err != nil {
			return res, err
		}
		trial = max(trial, cur.ns[0])
	}
	repeat := max(int(float64(o.Run.Nanoseconds())/max(trial, 1)), 1000)
	// An even number of groups, so that in every round each side goes
	// first after the reference as often as the other: with 5, this
	// tree's went first 3 times a round, and against itself a path came
	// out at +11.6% in a CI run with a VM beside it.
	runs := max(int(o.Side/o.Run), 1)
	runs += runs % 2
	res.Packets = repeat * runs
	res.PrecisionNs = 1 / float64(res.Packets)
	on0, all0, err := c.tally()
	if err != nil {
		return res, err
	}
	var ratios, vsBase, nsPath, nsRef, nsBase, trPath, trRef []float64
	for range o.Rounds {
		// One round: runs groups of timed runs, the reference, this
		// tree's program and the base's, the last two in turns first;
		// the round's figures are the medians of its groups, so one
		// group slowed by a neighbour does not move them.
		var pr, ptr, pairs, vs []float64
		cur.ns, cur.tr = nil, nil
		if base != nil {
			base.ns, base.tr = nil, nil
		}
		for i := range runs {
			a, ta, err := t.run(ref, frame, repeat)
			if err != nil {
				return res, err
			}
			pr, ptr = append(pr, a), append(ptr, ta)
			order := []*side{cur}
			if base != nil {
				order = []*side{cur, base}
				if i%2 == 1 {
					order = []*side{base, cur}
				}
			}
			for _, sd := range order {
				if err := sd.time(t, frame, repeat); err != nil {
					return res, err
				}
			}
			pairs = append(pairs, cur.ns[i]/a)
			if base != nil {
				vs = append(vs, cur.ns[i]/base.ns[i])
			}
		}
		nsRef, nsPath = append(nsRef, median(pr)), append(nsPath, median(cur.ns))
		trRef, trPath = append(trRef, median(ptr)), append(trPath, median(cur.tr))
		ratios = append(ratios, median(pairs))
		if base != nil {
			nsBase, vsBase = append(nsBase, median(base.ns)), append(vsBase, median(vs))
		}
	}
	on1, all1, err := c.tally()
	if err != nil {
		return res, err
	}
	res.OnPath = float64(on1-on0) / float64(max(all1-all0, 1))
	res.Rounds = o.Rounds
	res.NsPerPkt, res.RefNsPerPkt, res.Ratio = median(nsPath), median(nsRef), median(ratios)
	res.TestRunNsPerPkt, res.TestRunRefNsPerPkt = median(trPath), median(trRef)
	res.Spread = (slices.Max(ratios) - slices.Min(ratios)) / res.Ratio
	if base != nil {
		res.BaseNsPerPkt, res.VsBase = median(nsBase), median(vsBase)
		res.VsBaseSpread = (slices.Max(vsBase) - slices.Min(vsBase)) / res.VsBase
	}
	if res.OnPath < 0.99 {
		return res, fmt.Errorf("%s: only %.2f%% of %d packets took the path (%s)", p.name, 100*res.OnPath, all1-all0, c.what)
	}
	return res, nil
}

// SameLayout says whether base can be loaded in cur's place by this tree's
// Go: the same programs, maps (type, key and value sizes, flags) and
// variables (sizes). A change of layout is compared with the baseline's
// recorded figures instead.
func SameLayout(base, cur *ebpf.CollectionSpec) error {
	var diffs []string
	for _, name := range keys(base.Programs, cur.Programs) {
		if base.Programs[name] == nil || cur.Programs[name] == nil {
			diffs = append(diffs, "program "+name)
		}
	}
	for _, name := range keys(base.Maps, cur.Maps) {
		a, b := base.Maps[name], cur.Maps[name]
		if a == nil || b == nil || a.Type != b.Type || a.KeySize != b.KeySize || a.ValueSize != b.ValueSize || a.Flags != b.Flags {
			diffs = append(diffs, "map "+name)
		}
	}
	for _, name := range keys(base.Variables, cur.Variables) {
		a, b := base.Variables[name], cur.Variables[name]
		if a == nil || b == nil || a.Size() != b.Size() {
			diffs = append(diffs, "variable "+name)
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("the layout differs: %s", strings.Join(diffs, ", "))
	}
	return nil
}

func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
