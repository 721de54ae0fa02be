package shield

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/capture"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/oldpins"
	"github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/shield/tick"
)

const (
	// DefaultTableSize is the default capacity of the sources table.
	DefaultTableSize = 1 << 20
	// MaxTableSize bounds the table: 64 bytes of kernel memory per
	// source, so 16M sources is 1 GiB.
	MaxTableSize = 1 << 24
)

// Options configure Load.
type Options struct {
	// TableSize is the capacity of the per-source table: a power of two
	// from MinTableSize to MaxTableSize (DefaultTableSize, 1,048,576, is
	// the usual choice). Zero is an error, not a default: a size is always
	// the caller's decision.
	TableSize uint32
	// Clock is the program's time source (default ClockJiffies).
	Clock config.Clock
	// PinPath, when set, pins every map there (creating the directory) and
	// reuses maps already pinned with the same definition, so a restarted
	// service adopts state.
	PinPath string
	// Limits are written when the collection carries no configuration yet
	// (a fresh load); adopted pinned state keeps its own. Zero means
	// DefaultLimits.
	Limits config.Limits
	// Ephemeral is the edge's ephemeral port range (LocalPortRange of its
	// namespace): traffic to it that opens no connection is return
	// traffic, judged by Limits.Unprotected. Zero: DefaultEphemeral. It
	// is a fact of the namespace, not configuration: adopted state takes
	// this one.
	Ephemeral config.PortRange
	// Compat loads shield_compat (no cmpxchg refills) whatever the kernel,
	// as the loader does by itself before 5.12: the regression gate runs the
	// compat program's scenarios on every kernel.
	Compat bool
	// Spec, when set, is loaded in place of bpf/shield.c's embedded object:
	// the regression gate times the object committed at a base revision
	// against this tree's, in one process. Its maps and variables must be
	// this tree's (gate.SameLayout).
	Spec *ebpf.CollectionSpec
	// Extend, when set, loads the program as an extension
	// (BPF_PROG_TYPE_EXT, freplace) of the function ExtendFunc of Extend,
	// a slot of a multi-program dispatcher (shield/pin), in place of an
	// XDP program of its own.
	Extend     *ebpf.Program
	ExtendFunc string
}

// The traffic classes index the admission buckets: enum traffic_class in
// bpf/shield.c, as bpf2go emits it.
const (
	classProtected   = uint32(bpf.ShieldTrafficClassCLASS_PROTECTED)
	classUnprotected = uint32(bpf.ShieldTrafficClassCLASS_UNPROTECTED)
	numClasses       = uint32(bpf.ShieldTrafficClassMAX_CLASSES)
)

// ktimeSlack is how far apart two CPUs' ktime readings may be taken to be
// (clock_slack_ns in bpf/shield.c): far more than they ever are, far less
// than a restart with another clock moves a bucket's time.
const ktimeSlack = 1_000_000

// objects is what a Load asks the kernel for: bpf.ShieldObjects less the
// program not in use. loadObjects puts shield_compat in shield's place
// when the kernel needs it, so one of the two large programs is verified
// per load, not both.
type objects struct {
	bpf.ShieldMaps
	bpf.ShieldVariables
	ClockProbe *ebpf.Program `ebpf:"clock_probe"`
	Shield     *ebpf.Program `ebpf:"shield"`
}

// Close closes the programs and maps.
func (o *objects) Close() error {
	return errors.Join(o.ClockProbe.Close(), o.Shield.Close(), o.ShieldMaps.Close())
}

// Shield is a loaded shield program and its maps.
type Shield struct {
	objs      objects
	innerSpec *ebpf.MapSpec
	clock     config.Clock
	tickNs    uint64 // the clock's resolution when it ticks (jiffies), else 0
	compat    bool   // shield_compat loaded as the program (no cmpxchg refills)
	// extend and extendFunc: the program is an extension of this function
	// of a dispatcher (Options.Extend).
	extend     *ebpf.Program
	extendFunc string
	// clockNote says how adopted state written with another clock was
	// converted ("" when it was not).
	clockNote string
	loadEph   config.PortRange // the ephemeral ports Load was given (Reset goes back to them)

	mu     sync.Mutex // serialises changes of configuration and lists
	limits config.Limits
	eph    config.PortRange                  // the edge's ephemeral ports (config.eph_lo, eph_hi)
	snap   [2]atomic.Pointer[[]netip.Prefix] // per List: what its tries hold (lists.go)
	// prev is the inner config map the last swap replaced, kept open until
	// the next one: before Linux 6.7 an inner map removed from an array of
	// maps was freed without waiting for an RCU grace period, while a
	// program on another CPU could still be reading it.
	prev *ebpf.Map
	// gen is the verdict generation the configuration in force names
	// (CONFIG_LISTS_B): 0 lists4/lists6, 1 lists4_b/lists6_b (lists.go).
	gen uint32
	// rules are the hit counters (rule_counts) of the entries in force;
	// hits is rule_counts mapped (rulecounts.go).
	rules atomic.Pointer[map[netip.Prefix]uint32]
	hits  ruleCounts
	// The presence filter (presence.go): the one in force and the hash's
	// key, both written into every configuration; filterMu orders
	// refreshes; presence maps both filters (presenceMap the mapping).
	filter          uint32
	filterSeed      uint64
	hashKeys        [5]uint64 // hash_of's keys: hashKeys(filterSeed)
	setBits         uint32    // log2 of the table's sets (set_bits)
	filterMu        sync.Mutex
	presence        []uint64
	presenceMap     []byte
	afterFilterWalk func() // tests: runs between a refresh's walk and its swap
	// table maps the sources table (table.go; tableMap the mapping),
	// mapped on first use under tableMu: the API reads it concurrently,
	// holding tableMu's read lock (readTable), so Close unmaps it only
	// once no walk reads it.
	tableMu     sync.RWMutex
	table       []bpf.ShieldSourceSet
	tableMap    []byte
	tableClosed bool // Close unmapped it: no new mapping

	pinPath   string             // the pin directory; "" unpinned
	recovered *oldpins.Recovery  // what Load rolled back of an old version's journal
	migrated  *oldpins.Migration // what Load copied from a pinned table of another layout or size

	cap *capture.Switch // the capture of dropped frames (capture.go)
}

// Validate checks opts whole, before anything is created (Load and
// pin.Attach call it first). Zero Limits stand for DefaultLimits.
func (o Options) Validate() error {
	var errs []error
	if err := CheckTableSize(o.TableSize); err != nil {
		errs = append(errs, err)
	}
	if !o.Limits.IsZero() {
		if err := o.Limits.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("limits: %w", err))
		}
	}
	if o.Ephemeral != (config.PortRange{}) {
		if err := o.Ephemeral.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if !o.Clock.Valid() {
		errs = append(errs, fmt.Errorf("unknown clock %d", o.Clock))
	}
	if (o.Extend == nil) != (o.ExtendFunc == "") {
		errs = append(errs, errors.New("options Extend and ExtendFunc go together"))
	}
	return errors.Join(errs...)
}

// Load loads the program and its maps. Nothing is attached. Bad options are
// rejected before anything is created (the pin directory included).
func Load(opts Options) (*Shield, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Limits.IsZero() {
		opts.Limits = config.DefaultLimits()
	}
	opts.Limits = opts.Limits.WithDefaults()
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}

	spec, err := bpf.LoadShield()
	if opts.Spec != nil {
		spec, err = opts.Spec.Copy(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("load spec: %w", err)
	}
	spec.Maps[bpf.ShieldMapSources].MaxEntries = opts.TableSize / uint32(source.Ways)
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	hits := spec.Maps[bpf.ShieldMapRuleCounts]
	if hits == nil {
		return nil, fmt.Errorf("the program has no %s map (an object built before it?)", bpf.ShieldMapRuleCounts)
	}
	hits.MaxEntries = maxRules * uint32(cpus)
	// The hash's keys come from the seed in the pinned configuration, or
	// a new one: they must be known before the program is loaded.
	seed, pinned, err := pinnedSeed(opts.PinPath)
	if err != nil {
		return nil, err
	}
	if !pinned {
		if seed, err = newFilterSeed(); err != nil {
			return nil, err
		}
	}
	keys := source.HashKeys(seed)
	vars := map[string]any{
		bpf.ShieldVarClockMode: uint8(opts.Clock),
		bpf.ShieldVarHashKey:   keys,
		bpf.ShieldVarSetBits:   source.SetBits(opts.TableSize),
	}
	var tickNs, slack uint64
	switch opts.Clock {
	case config.ClockJiffies:
		nsPerJiffy, err := tick.Jiffy()
		if err != nil {
			return nil, err
		}
		if err := opts.Limits.CheckTick(opts.Clock, nsPerJiffy); err != nil {
			return nil, fmt.Errorf("limits: %w", err)
		}
		vars[bpf.ShieldVarNsPerJiffy] = nsPerJiffy
		tickNs, slack = nsPerJiffy, 2*nsPerJiffy
	case config.ClockKtime:
		slack = ktimeSlack
	}
	vars[bpf.ShieldVarClockSlackNs] = slack

	var collOpts ebpf.CollectionOptions
	if opts.PinPath != "" {
		if err := os.MkdirAll(opts.PinPath, 0o700); err != nil {
			return nil, fmt.Errorf("create pin directory: %w", err)
		}
		collOpts.Maps.PinPath = opts.PinPath
		for name, m := range spec.Maps {
			// Global data (.bss, .rodata) belongs to one program instance.
			// The capture buffer belongs to the process reading it.
			if filepath.Ext(name) == "" && name != bpf.ShieldMapCaptured {
				m.Pinning = ebpf.PinByName
			}
		}
	}

	// A pinned sources table of another layout (the LRU hash before the
	// array of sets) or size is moved aside, and its sources copied into
	// the new table once it is loaded.
	// A load refused before the copy puts the pin it moved back: the old
	// program stays attached on its table.
	var oldSources *ebpf.Map
	var moved bool
	if opts.PinPath != "" {
		if oldSources, moved, err = oldpins.TakeSources(opts.PinPath, spec.Maps[bpf.ShieldMapSources]); err != nil {
			return nil, err
		}
	}
	if opts.PinPath != "" {
		if err := oldpins.DropVerdictTries(opts.PinPath, spec); err != nil {
			return nil, err
		}
	}
	closeOld := func() {
		if oldSources != nil {
			oldSources.Close()
		}
		if moved {
			oldpins.PutBackSources(opts.PinPath)
		}
	}

	eph := opts.Ephemeral
	if eph == (config.PortRange{}) {
		eph = config.DefaultEphemeral
	}
	s := &Shield{innerSpec: spec.Maps[bpf.ShieldMapConfigMap].InnerMap, clock: opts.Clock, tickNs: tickNs,
		filterSeed: seed, hashKeys: keys, setBits: source.SetBits(opts.TableSize), eph: eph, loadEph: eph}
	s.compat = opts.Compat || forceCompat || !haveCmpxchg()
	s.extend, s.extendFunc = opts.Extend, opts.ExtendFunc
	err = s.loadObjects(spec, vars, &collOpts)
	var ve *ebpf.VerifierError
	if err != nil && !s.compat && errors.As(err, &ve) {
		// A kernel may pass the probe and still refuse BPF_CMPXCHG in the
		// program: Debian's 5.10.0-32 does ("BPF_STX uses reserved
		// fields"). The compat program is the answer there too.
		s.compat = true
		err = s.loadObjects(spec, vars, &collOpts)
	}
	if err != nil {
		closeOld()
		return nil, fmt.Errorf("load shield: %w", err)
	}
	s.cap = capture.New(s.objs.Captured, s.objs.CaptureSample)

	loaded := false
	defer func() {
		if !loaded {
			closeOld()
		}
	}()
	s.pinPath = opts.PinPath
	if err := s.hits.mapFrom(s.objs.RuleCounts); err != nil {
		s.Close()
		return nil, err
	}
	cfg, ok, err := s.readConfig()
	if err != nil {
		s.Close()
		return nil, err
	}
	if ok && cfg.Flags&config.FlagListsB != 0 {
		s.gen = 1
	}
	// Pins of a version before the verdict generations hold the lists in
	// tries of their own: read from there (after rolling back a change a
	// crash interrupted), put in force below, then unpinned.
	var oldLists *oldpins.Lists
	if s.pinPath != "" {
		if oldLists, err = oldpins.TakeLists(s.pinPath); err != nil {
			s.Close()
			return nil, err
		}
	}
	if oldLists != nil {
		s.snap[lists.AllowList].Store(&oldLists.Allow)
		s.snap[lists.DenyList].Store(&oldLists.Deny)
		s.recovered = oldLists.Recovered
	} else if err := s.loadSnapshots(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.loadRules(); err != nil {
		s.Close()
		return nil, err
	}
	oldHits, err := s.carryRuleHits()
	if err != nil {
		s.Close()
		return nil, err
	}
	if ok {
		dsts, err := s.protectedDsts()
		if err != nil {
			s.Close()
			return nil, err
		}
		s.limits = config.LimitsOf(cfg, dsts)
		if s.limits.Aggregates, err = s.aggregates(); err != nil {
			s.Close()
			return nil, err
		}
		s.limits = s.limits.WithDefaults()
		if cfg.FilterSeed != seed {
			s.Close()
			return nil, fmt.Errorf("the pinned configuration's seed changed while loading (another process?)")
		}
		s.filter = cfg.Filter
		// Pinned limits set under another clock may be ones this clock
		// cannot honour: refuse before anything is converted.
		if err := s.limits.CheckTick(s.clock, s.tickNs); err != nil {
			s.Close()
			return nil, fmt.Errorf("pinned limits: %w (restart with the clock they were set for, then change them with PUT /v1/limits)", err)
		}
		if err := s.adoptClock(cfg); err != nil {
			s.Close()
			return nil, err
		}
		// The ephemeral ports are this namespace's, whatever the pins say
		// (pins written before they were hold 0, 0: none).
		if cfg.EphLo != s.eph.Lo || cfg.EphHi != s.eph.Hi {
			if err := s.publish(s.limits); err != nil {
				s.Close()
				return nil, err
			}
		}
		// The pinned filter may not hold every pinned source (pins of a
		// program without one): rebuild it from the table.
		if _, err := s.RefreshFilter(context.Background()); err != nil {
			s.Close()
			return nil, err
		}
	} else {
		if err := s.start(opts.Limits); err != nil {
			s.Close()
			return nil, err
		}
	}
	// Lists the generation in force does not hold as they are (adopted
	// from old pins, own addresses changed) are put in force whole.
	if err := s.settleLists(); err != nil {
		s.Close()
		return nil, err
	}
	if oldLists != nil {
		if err := oldLists.Remove(); err != nil {
			s.Close()
			return nil, err
		}
	}
	if oldHits {
		if err := oldpins.RemoveRuleHits(s.pinPath); err != nil {
			s.Close()
			return nil, err
		}
	}
	loaded = true
	if oldSources != nil {
		if err := s.migrate(oldSources, opts.PinPath); err != nil {
			s.Close()
			return nil, fmt.Errorf("copy the pinned sources into the new table: %w", err)
		}
	}
	return s, nil
}

// adoptClock converts adopted state written with another clock: the
// admission buckets' times are moved by the difference of the two clocks'
// readings, so they keep their credit and refill at their rate. Source
// buckets are not walked: the program gives a bucket whose time lies ahead
// of its clock one full refill and restarts its time (bpf/shield.c,
// refill()), and one whose time lies far behind gets a full refill anyway,
// so each tracked source is refilled at most once by the switch. The
// configuration is then republished with the new clock recorded.
func (s *Shield) adoptClock(cfg bpf.ShieldConfig) error {
	rec := cfg.Flags >> config.ClockShift
	if rec == uint32(s.clock)+1 {
		return nil
	}
	from := config.Clock(rec - 1) // rec 0 (not recorded) is clock(255): unknown
	if from == config.ClockVirtual || s.clock == config.ClockVirtual || !from.Valid() {
		s.clockNote = fmt.Sprintf("pinned state written with clock %s, now %s: times not converted; each bucket is refilled once", from, s.clock)
	} else {
		oldNow, err := s.clockRead(from)
		if err != nil {
			return err
		}
		newNow, err := s.clockRead(s.clock)
		if err != nil {
			return err
		}
		for i := range numClasses {
			var b bpf.ShieldBucket
			if err := s.objs.Admission.Lookup(i, &b); err != nil {
				return fmt.Errorf("read admission bucket %d: %w", i, err)
			}
			b.LastNs += newNow - oldNow
			if err := s.objs.Admission.Put(i, b); err != nil {
				return fmt.Errorf("convert admission bucket %d: %w", i, err)
			}
		}
		s.clockNote = fmt.Sprintf("pinned state written with clock %s converted to %s (each tracked source is refilled once)", from, s.clock)
	}
	return s.publish(s.limits)
}

// ClockNote says how pinned state written with another clock was adopted,
// or is "" when the clock did not change.
func (s *Shield) ClockNote() string { return s.clockNote }

// loadObjects loads the collection with the load-time switches vars, with
// shield_compat in shield's place when s.compat says the kernel refuses
// BPF_CMPXCHG (5.10, 5.11).
func (s *Shield) loadObjects(spec *ebpf.CollectionSpec, vars map[string]any, opts *ebpf.CollectionOptions) error {
	if s.compat {
		spec = spec.Copy()
		spec.Programs[bpf.ShieldProgShield] = spec.Programs[bpf.ShieldProgShieldCompat].Copy()
	}
	if s.extend != nil {
		// Only shield is loaded (objects): the program array `next`
		// takes its type from the first program using it, and 5.10
		// took an extension's type as the array's, refusing a program
		// of another type with EINVAL.
		spec = spec.Copy()
		p := spec.Programs[bpf.ShieldProgShield]
		p.Type, p.AttachType, p.AttachTarget, p.AttachTo = ebpf.Extension, 0, s.extend, s.extendFunc
	}
	return bpf.Load(spec, vars, &s.objs, opts)
}

// Close releases the program and maps (pinned maps stay pinned).
func (s *Shield) Close() error {
	s.cap.Close()
	if s.prev != nil {
		s.prev.Close()
	}
	s.hits.close()
	if s.presenceMap != nil {
		unix.Munmap(s.presenceMap)
		s.presenceMap, s.presence = nil, nil
	}
	s.tableMu.Lock()
	if s.tableMap != nil {
		unix.Munmap(s.tableMap)
		s.tableMap, s.table = nil, nil
	}
	s.tableClosed = true
	s.tableMu.Unlock()
	return s.objs.Close()
}

// Program is the XDP program, for attaching and test runs.
func (s *Shield) Program() *ebpf.Program { return s.objs.Shield }

// Next is the one-slot program array the shield tail-calls for every
// packet it passes (the XDP balancer, xdplb.Balancer.Chain); empty, the
// packet passes.
func (s *Shield) Next() *ebpf.Map { return s.objs.Next }

// TableSize is the capacity of the sources table: its sets times ways.
func (s *Shield) TableSize() uint32 { return s.objs.Sources.MaxEntries() * uint32(source.Ways) }

// Compat reports whether the kernel lacks BPF_CMPXCHG (before 5.12), so the
// program in use is shield_compat, whose refills can race (bpf/shield.c,
// refill()).
func (s *Shield) Compat() bool { return s.compat }

// Clock is the time source the program was loaded with.
func (s *Shield) Clock() config.Clock { return s.clock }

// Limits returns the configuration in force.
func (s *Shield) Limits() config.Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limits
}

// SetLimits validates l and makes it the configuration in one atomic swap.
// Its errors wrap ErrInvalid when l is at fault.
func (s *Shield) SetLimits(l config.Limits) error {
	_, err := s.ReplaceLimits(l)
	return err
}

// ReplaceLimits is SetLimits that also returns the limits it replaced,
// read under the same lock as the change.
func (s *Shield) ReplaceLimits(l config.Limits) (old config.Limits, err error) {
	if err := l.Validate(); err != nil {
		return config.Limits{}, err
	}
	l = l.WithDefaults()
	if err := l.CheckTick(s.clock, s.tickNs); err != nil {
		return config.Limits{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old = s.limits
	return old, s.publish(l)
}

// SetTime sets the virtual clock; only for ClockVirtual.
func (s *Shield) SetTime(ns uint64) error {
	if s.clock != config.ClockVirtual {
		return errors.New("set time: the shield was not loaded with the virtual clock")
	}
	return s.objs.VirtualNowNs.Set(ns)
}

// Counters reads the packet counters, summed over CPUs.
func (s *Shield) Counters() (counter.Counters, error) { return readCounters(s.objs.Counters) }

// Bytes reads the bytes of the packets Counters counts (each frame's whole
// length, from its Ethernet header), summed over CPUs, in the same shape.
func (s *Shield) Bytes() (counter.Counters, error) { return readCounters(s.objs.ByteCounters) }
