// The run of a storm: setup, the phases and their measurements, teardown.
// scenario.go holds its configuration and its result types.

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/kernel"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/source"
)

// run holds what a Run needs across phases.
type run struct {
	cfg   Config
	log   *slog.Logger
	dep   parts.Deployment
	top   *storm.Topology
	sh    *shield.Shield
	svc   parts.ShieldSide // `shield serve`'s wiring, on edge0
	token string
	xdp   []io.Closer     // detach the shield from edge0 and edge1
	storm parts.StormSide // generators (the allow/deny-listed sources on AF_PACKET: a few thousand frames/s need no 28 ms live-frames runs) and client
	watch *apiWatch
	res   *Result
	edge  parts.EdgeSide // HTTPS server and datagram service
	tpls  map[stormKind][]storm.Template
	flows map[stormKind][]stormFlow // what each template is, in the same order
	few   []netip.Addr              // the few storm's sources, both families
	base  [parts.NumKinds]time.Duration
	// restarted: the shield was restarted in a phase (Restarter).
	restarted bool
}

// Run builds the topology, runs every phase and returns the result. An error
// means the run could not be carried out; failed assertions are in
// Result.OK and Result.Failed. Everything it creates is removed before it
// returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	r := &run{cfg: cfg, log: cfg.Logger, dep: cfg.Deployment}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.dep == nil {
		r.dep = parts.Local{}
	}
	r.res = &Result{
		Started:   time.Now().UTC(),
		Kernel:    kernel.Release(),
		Rate:      cfg.Rate,
		Phase:     cfg.PhaseDuration.Seconds(),
		TableSize: cfg.TableSize,
		Limits:    cfg.Limits,
		Budget:    cfg.Budget,
		Client:    cfg.Client,
		LegitNote: "established source, not allow-listed: admitted by its first packet in the baseline, then held to the same per-source bucket as everyone",
	}
	// One storm at a time on a machine: two measure each other (`go test
	// ./...` runs the namespace storm and the container lane at once).
	unlock, err := parts.LockStorms(ctx, r.log)
	if err != nil {
		r.res.Error = err.Error()
		return r.res, err
	}
	defer unlock()
	r.res.Started = time.Now().UTC()
	// The generator spends its time in long BPF_PROG_RUN syscalls; with
	// GOMAXPROCS equal to the core count, the P it holds through each call
	// is only handed over when sysmon notices (up to 10 ms), which the
	// client and server would pay as latency. One P more than cores keeps
	// them a full share of the machine.
	if n := runtime.NumCPU() + 1; runtime.GOMAXPROCS(0) < n {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	defer r.close()
	if err := r.setup(); err != nil {
		return nil, err
	}
	res, err := r.phases(ctx)
	if err != nil {
		res.OK = false
		res.Error = err.Error()
	}
	return res, err
}

// plan is one phase to run.
type plan struct {
	name  string
	storm stormKind
}

// phasePlan lists the phases of a run raising the storms of sources (few,
// many or both).
func phasePlan(sources string) []plan {
	phases := []plan{{"baseline", stormNone}}
	if sources != "many" {
		phases = append(phases, plan{"few-sources", stormFew})
	}
	if sources != "few" {
		phases = append(phases, plan{"many-forged", stormMany})
	}
	return append(phases, plan{"recovery", stormNone})
}

func (r *run) phases(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	phases := phasePlan(cfg.Sources)
	for _, p := range phases {
		ph, err := r.phase(ctx, p.name, p.storm, true)
		if err != nil {
			return r.res, fmt.Errorf("phase %s: %w", p.name, err)
		}
		r.res.Phases = append(r.res.Phases, ph)
		if ctx.Err() != nil {
			return r.res, ctx.Err()
		}
	}
	if cfg.Contrast {
		for _, l := range r.xdp {
			if err := l.Close(); err != nil {
				return r.res, fmt.Errorf("detach shield for the contrast run: %w", err)
			}
		}
		r.xdp = nil
		for _, p := range phases {
			if p.storm == stormNone {
				continue
			}
			ph, err := r.phase(ctx, "no-shield/"+p.name, p.storm, false)
			if err != nil {
				return r.res, fmt.Errorf("contrast phase %s: %w", p.name, err)
			}
			r.res.Contrast = append(r.res.Contrast, ph)
			if ctx.Err() != nil {
				return r.res, ctx.Err()
			}
		}
	}
	r.res.OK = true
	for _, p := range r.res.Phases {
		for _, c := range p.Checks {
			if !c.OK {
				r.res.OK = false
				r.res.Failed = append(r.res.Failed, p.Name+": "+c.Name+": "+c.Detail)
			}
		}
	}
	// Without the shield the budget is meant to break: only the check
	// that it did counts.
	for _, p := range r.res.Contrast {
		for _, c := range p.Checks {
			if !c.OK && !c.Budget {
				r.res.OK = false
				r.res.Failed = append(r.res.Failed, p.Name+": "+c.Name+": "+c.Detail)
			}
		}
	}
	return r.res, nil
}

func (r *run) setup() error {
	var err error
	if r.top, err = storm.NewTopologyIn(r.dep); err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	r.res.RemovedOld = r.top.RemovedStale()
	r.res.RPS = r.top.RPS
	if err := r.startService(); err != nil {
		return err
	}
	if r.storm, err = r.dep.StartStorm(r.top, r.cfg.Generator); err != nil {
		return fmt.Errorf("storm side: %w", err)
	}
	r.res.Generator = r.storm.Name() + " (allow/deny-listed sources: af_packet)"
	if err := r.buildStorms(); err != nil {
		return err
	}
	c := newAPICounters(r.svc.APIAddr(), r.token, r.top.Edge)
	r.watch = &apiWatch{c: c, timeout: r.cfg.WatchTimeout}

	if r.edge, err = r.dep.StartEdge(r.top, r.cfg.UDPCapacity); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	if err := r.storm.StartClient(r.edge.CA(), r.cfg.Client, storm.Front4, storm.Front6); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	// Warm up: neighbour resolution, the client's first (admitted) packets.
	time.Sleep(time.Second)
	return nil
}

func (r *run) close() {
	if r.storm != nil {
		if err := r.storm.Close(); err != nil {
			r.log.Warn("stop the storm side", logErr, err)
		}
	}
	if r.edge != nil {
		if err := r.edge.Close(); err != nil {
			r.log.Warn("stop the edge", logErr, err)
		}
	}
	if r.watch != nil {
		r.watch.c.Close()
	}
	for _, l := range r.xdp {
		l.Close()
	}
	if r.svc != nil {
		if err := r.svc.Close(); err != nil {
			r.log.Warn("stop shield service", logErr, err)
		}
	}
	if err := r.top.Close(); err != nil {
		r.log.Warn("remove namespaces", logErr, err)
	}
}

func (r *run) buildStorms() error {
	r.tpls = map[stormKind][]storm.Template{}
	r.flows = map[stormKind][]stormFlow{}
	add := func(k stormKind, f storm.Flow, w float64, role string) error {
		dst := storm.Edge4
		if f.First.Is6() {
			dst = storm.Edge6
		}
		t, err := storm.BuildTemplate(f, r.top.StormMAC, r.top.EdgeMAC, dst)
		if err != nil {
			return err
		}
		r.tpls[k] = append(r.tpls[k], t)
		r.flows[k] = append(r.flows[k], stormFlow{Flow: f, weight: w, role: role})
		return nil
	}
	many4 := min(r.cfg.ManySources, storm.MaxMany4)
	many6 := r.cfg.ManySources
	// Half the storm asks the datagram service, where an unfiltered flood
	// does its harm; a quarter is SYNs, a quarter pings. Of the SYNs, 3/5
	// go to the HTTPS port, 1/5 to a port no limit names (OtherPort), 1/5
	// to the HTTPS port behind a Destination Options header (IPv6; IPv4
	// sends the plain SYN there): the two escapes of issue 23, which the
	// shield must limit as the plain SYN.
	share := map[storm.Proto]float64{storm.UDP: 0.5, storm.TCPSYN: 0.15, storm.TCPSYNOther: 0.05, storm.TCPSYNExt: 0.05, storm.ICMP: 0.25}
	for _, p := range []storm.Proto{storm.UDP, storm.TCPSYN, storm.TCPSYNOther, storm.TCPSYNExt, storm.ICMP} {
		p4 := p
		if p == storm.TCPSYNExt {
			p4 = storm.TCPSYN
		}
		// Few: every source of both families at the same rate.
		if err := add(stormFew, storm.Flow{Proto: p4, First: storm.Few4, Count: r.cfg.FewSources}, share[p]/2, "storm"); err != nil {
			return err
		}
		if err := add(stormFew, storm.Flow{Proto: p, First: storm.Few6, Count: r.cfg.FewSources}, share[p]/2, "storm"); err != nil {
			return err
		}
		// Many: shares proportional to each family's range, so every forged
		// address recurs at the same (low) rate, as with a forger drawing
		// from the whole address space.
		tot := float64(many4) + float64(many6)
		if err := add(stormMany, storm.Flow{Proto: p4, First: storm.Many4, Count: many4}, share[p]*float64(many4)/tot, "storm"); err != nil {
			return err
		}
		if err := add(stormMany, storm.Flow{Proto: p, First: storm.Many6, Count: many6}, share[p]*float64(many6)/tot, "storm"); err != nil {
			return err
		}
	}
	for _, first := range []netip.Addr{storm.Few4, storm.Few6} {
		f := storm.Flow{First: first, Count: r.cfg.FewSources}
		for i := range f.Count {
			r.few = append(r.few, f.Source(i))
		}
	}
	// The allow-listed sources ping rather than ask the datagram service:
	// what they send is the operator's trust, not the storm, and must not
	// spend the service's capacity.
	for _, a := range []netip.Addr{storm.Allowed4, storm.Allowed6} {
		if err := add(listed, storm.Flow{Proto: storm.ICMP, First: a, Count: 1}, 1, "allowed"); err != nil {
			return err
		}
	}
	for _, a := range []netip.Addr{storm.Denied4, storm.Denied6} {
		if err := add(listed, storm.Flow{Proto: storm.TCPSYN, First: a, Count: 1}, 1, "denied"); err != nil {
			return err
		}
	}
	return nil
}

// stormFlow is one template's flow, its share of the storm and its role:
// "storm", "allowed" or "denied".
type stormFlow struct {
	storm.Flow
	weight float64
	role   string
}

func (f stormFlow) name() string { return f.role + " " + f.Flow.String() }

func (r *run) weights(k stormKind) []float64 {
	var w []float64
	for _, f := range r.flows[k] {
		w = append(w, f.weight)
	}
	return w
}

// snapshot is what is read at a phase boundary.
type snapshot struct {
	at       time.Time
	counters counter.Counters
	veth     storm.VethCounters
	sources  map[netip.Addr]source.Source // the client's and the few storm's, when tracked
	served   uint64                       // requests the datagram service answered
	udp      parts.UDPCounters            // the edge's
}

func (r *run) snap() (snapshot, error) {
	s := snapshot{at: time.Now(), sources: map[netip.Addr]source.Source{}}
	var err error
	if s.counters, err = r.sh.Counters(); err != nil {
		return s, err
	}
	for _, a := range append([]netip.Addr{storm.Client4, storm.Client6}, r.few...) {
		src, ok, err := r.sh.Source(a)
		if err != nil {
			return s, err
		}
		if ok {
			s.sources[a] = src
		}
	}
	if s.served, err = r.edge.Served(); err != nil {
		return s, err
	}
	if s.udp, err = parts.ReadUDPCounters(r.top.Edge); err != nil {
		return s, err
	}
	if s.veth, err = r.top.VethStats(); err != nil {
		return s, err
	}
	return s, nil
}

// phase runs one phase: the legitimate client throughout, the storm of kind
// k if any, the API watch and the table watcher; then settles and reads.
func (r *run) phase(ctx context.Context, name string, k stormKind, shielded bool) (*Phase, error) {
	log := r.log.With(logPhase, name)
	ph := &Phase{Name: name, Storm: string(k), Shield: shielded, Table: TableStats{Capacity: r.cfg.TableSize}}

	before, err := r.snap()
	if err != nil {
		return nil, err
	}

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if _, err := r.storm.Switch(true); err != nil {
		return nil, err
	}
	r.watch.switchPhase(true)
	start := time.Now()

	var sent atomic.Uint64
	var per, perListed []uint64
	var genErr, listedErr error
	if k != stormNone {
		listedSpec := storm.Spec{
			Templates: r.tpls[listed],
			Rate:      r.cfg.ListedRate * uint64(len(r.tpls[listed])),
			Duration:  r.cfg.PhaseDuration,
			MaxFrames: r.cfg.ListedRate * uint64(len(r.tpls[listed])) * uint64(r.cfg.PhaseDuration/time.Second+1),
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			perListed, listedErr = r.storm.Storm(pctx, true, listedSpec, &sent)
		}()
		spec := storm.Spec{
			Templates: r.tpls[k],
			Weights:   r.weights(k),
			Rate:      r.cfg.Rate,
			Duration:  r.cfg.PhaseDuration,
			MaxFrames: r.cfg.MaxRate * uint64(max(r.cfg.PhaseDuration/time.Second, 1)),
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			per, genErr = r.storm.Storm(pctx, false, spec, &sent)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.watch.run(pctx, r.cfg.WatchEvery)
	}()
	var restartErr error
	if rs, ok := r.dep.(parts.Restarter); ok && shielded && k != stormNone && !r.restarted {
		r.restarted = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Early, so the storm outlasts the restart on a slow
			// machine; the restart itself is not cut short by the
			// phase's end (only by the run's), which waits for it.
			select {
			case <-pctx.Done():
				restartErr = errors.New("the phase ended before the restart")
				return
			case <-time.After(r.cfg.PhaseDuration / 5):
			}
			r.watch.pause(true)
			defer r.watch.pause(false)
			st, err := rs.RestartShield(ctx)
			ph.Restart, restartErr = &st, err
		}()
	}
	var tableMu sync.Mutex
	if shielded {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.watchTable(pctx, &ph.Table, &tableMu)
		}()
	}

	// Progress, until the phase is over.
	timer := time.NewTimer(r.cfg.PhaseDuration)
	ticker := time.NewTicker(500 * time.Millisecond)
	lastC, lastSent, lastAt := before.counters, uint64(0), start
	waiting := true
	for waiting {
		select {
		case <-ctx.Done():
			waiting = false
		case <-timer.C:
			waiting = false
		case now := <-ticker.C:
			if r.cfg.Progress == nil {
				continue
			}
			p := Progress{Phase: name, Elapsed: now.Sub(start), Length: r.cfg.PhaseDuration, APIOK: r.watch.ok(), DropPPS: map[string]float64{}, Shield: shielded}
			dt := now.Sub(lastAt).Seconds()
			s := sent.Load()
			p.SentPPS = float64(s-lastSent) / dt
			lastSent, lastAt = s, now
			if c, err := r.sh.Counters(); err == nil && shielded {
				d := c.Sub(lastC)
				lastC = c
				for reason, n := range byReason(d, counter.Drop) {
					if n > 0 {
						p.DropPPS[reason] = float64(n) / dt
					}
				}
				p.PassPPS = float64(d.Verdict(counter.Pass)) / dt
			}
			p.P50, p.P99, p.Requests, p.Failures = r.storm.Peek()
			tableMu.Lock()
			p.Sources = ph.Table.End
			tableMu.Unlock()
			r.cfg.Progress(p)
		}
	}
	timer.Stop()
	ticker.Stop()
	cancel()
	wg.Wait()
	samples, recErr := r.storm.Switch(false)
	ph.API = r.watch.switchPhase(false)
	ph.Seconds = time.Since(start).Seconds()
	if err := errors.Join(genErr, listedErr, recErr); err != nil {
		return nil, err
	}

	// Let the veth ring and the stack drain before reading the counters.
	select {
	case <-ctx.Done():
	case <-time.After(r.cfg.Settle):
	}
	after, err := r.snap()
	if err != nil {
		return nil, err
	}
	if shielded {
		if n, err := r.sh.CountSources(ctx); err == nil {
			ph.Table.End = n
			ph.Table.Max = max(ph.Table.Max, n)
			ph.Table.Samples++
		}
	}
	r.fill(ph, samples, before, after, map[stormKind][]uint64{k: per, listed: perListed})
	if name == "baseline" {
		for kind := range parts.NumKinds {
			r.base[kind] = time.Duration(ph.Legit.Kinds[parts.Kind(kind).String()].P99Ms * 1e6)
		}
	}
	r.assert(ph, k)
	if ph.Restart != nil || restartErr != nil {
		r.assertRestart(ph, restartErr)
	}
	log.Debug("phase done", logRequests, ph.Legit.Requests, logSent, ph.Sent.Frames)
	return ph, nil
}

// watchTable samples the table's occupancy every two seconds (a walk of a
// full table costs the edge some CPU; the API watch reports the count too,
// from its own cached walk, and fails if it exceeds the capacity).
func (r *run) watchTable(ctx context.Context, t *TableStats, mu *sync.Mutex) {
	tk := time.NewTicker(2 * time.Second)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		n, err := r.sh.CountSources(ctx)
		if err != nil {
			continue
		}
		mu.Lock()
		t.Samples++
		t.End = n
		t.Max = max(t.Max, n)
		mu.Unlock()
	}
}
