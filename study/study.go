package study

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/kernel"
	"github.com/xdpshield/xdpshield/nft"
	"github.com/xdpshield/xdpshield/probe"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/sim"
	"github.com/xdpshield/xdpshield/study/proc"
	"github.com/xdpshield/xdpshield/study/report"
	"github.com/xdpshield/xdpshield/study/results"
)

// Log attribute keys.
const (
	logErr    = "err"
	logConfig = "config"
)

// Options are one study.
type Options struct {
	Quick     bool          // a short run for CI: fewer runs, shorter phases
	Runs      int           // repetitions of every measurement
	Phase     time.Duration // length of each legitimate-traffic phase
	DropPhase time.Duration // length of each drop-capacity measurement
	StormRate uint64        // frames/s of the storm the legitimate client meets
	Out       string        // output directory
	Command   string        // the command line, for the report
	Self      string        // the lab binary (runs the edge server: `shieldlab study-edge`)
	Bench     bool          // run the simulator's benchmarks (needs the go tool and the source tree)
	Progress  io.Writer     // the progress bar; nil: none
	Lines     bool          // Progress is no terminal: a line per step
	Logger    *slog.Logger
	// Only names the sections to run (Sections); empty: every one.
	Only []string
}

func (o Options) sections() ([]string, error) {
	if len(o.Only) == 0 {
		return results.Sections, nil
	}
	for _, x := range o.Only {
		if !slices.Contains(results.Sections, x) {
			return nil, fmt.Errorf("study: unknown section %q (sections: %v)", x, results.Sections)
		}
	}
	return o.Only, nil
}

// DefaultOptions is `make study`: 5 runs of 4 s phases, 3 s drop
// measurements; about 12 minutes on this machine.
func DefaultOptions() Options {
	return Options{Runs: 5, Phase: 4 * time.Second, DropPhase: 3 * time.Second, StormRate: 500_000, Bench: true}
}

// QuickOptions is `shieldlab study -quick`: every configuration once, short
// phases; it checks that each produced numbers, nothing more (CI's smoke
// run: 80 s here, 132 s with two runs, which no more separate than one).
func QuickOptions() Options {
	return Options{Quick: true, Runs: 1, Phase: time.Second, DropPhase: time.Second, StormRate: 500_000, Bench: true}
}

// dropOrder is the order of the drop-capacity targets in run: the shield
// and the shield passing almost nothing, compared run by run (Conclusion),
// take turns going first, so a drift of the shared machine within a run
// favours neither.
func dropOrder(run int) []string {
	order := slices.Clone(results.DropTargets)
	if run%2 == 1 {
		i, j := slices.Index(order, "shield"), slices.Index(order, "shield-nopass")
		if i >= 0 && j >= 0 {
			order[i], order[j] = order[j], order[i]
		}
	}
	return order
}

// study holds what a run needs.
type study struct {
	opt    Options
	log    *slog.Logger
	top    *storm.Topology
	gen    storm.Generator
	edge   *proc.Edge
	pool   *x509.CertPool
	few    []storm.Template
	many   []storm.Template
	manyW  []float64
	res    *results.Results
	bar    *bar
	nftRun nft.Runner
}

// Run carries out the study and writes its output to opt.Out.
func Run(ctx context.Context, opt Options) (*results.Results, error) {
	if opt.Runs < 1 || opt.Phase <= 0 || opt.DropPhase <= 0 || opt.Out == "" {
		return nil, fmt.Errorf("study: runs %d, phase %v, drop phase %v, out %q: all required", opt.Runs, opt.Phase, opt.DropPhase, opt.Out)
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, fmt.Errorf("study: %w", err)
	}
	secs, err := opt.sections()
	if err != nil {
		return nil, err
	}
	s := &study{opt: opt, log: opt.Logger, res: newResults(opt)}
	s.res.Sections = secs
	if s.log == nil {
		s.log = slog.Default()
	}
	// Not beside a storm (nor another study): each would measure the other.
	unlock, err := parts.LockStorms(ctx, s.log)
	if err != nil {
		return nil, fmt.Errorf("study: %w", err)
	}
	defer unlock()
	// As e2e.Run: the generator holds a P through long syscalls.
	if n := runtime.NumCPU() + 1; runtime.GOMAXPROCS(0) < n {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	main := slices.Contains(secs, results.SectionMain)
	steps := 0
	if main {
		steps += opt.Runs*len(results.Configs)*2 + opt.Runs*len(results.DropTargets)*len(results.DropSources)
		if opt.Bench {
			steps++
		}
	}
	if slices.Contains(secs, results.SectionPeers) {
		steps += s.l7Plan().steps(opt.Runs)
	}
	lists := slices.Contains(secs, results.SectionLists)
	if lists {
		steps += s.listSteps()
	}
	lbs := slices.Contains(secs, results.SectionXDPLB)
	if lbs {
		steps += s.lbSteps()
	}
	s.bar = newBar(opt.Progress, opt.Lines, steps)
	defer s.close()
	if main || lists || lbs {
		if err := s.setup(); err != nil {
			return nil, err
		}
	}
	if main {
		err = s.all(ctx)
	}
	if err == nil && slices.Contains(secs, results.SectionPeers) {
		err = s.l7Section(ctx)
	}
	if err == nil && lists {
		err = s.listSection(ctx)
	}
	if err == nil && lbs {
		err = s.lbSection(ctx)
	}
	s.bar.done()
	if err != nil {
		s.res.Error = err.Error()
	}
	s.res.Finish()
	if werr := report.Write(opt.Out, s.res); werr != nil {
		return s.res, errors.Join(err, werr)
	}
	return s.res, err
}

func (s *study) setup() error {
	var err error
	if s.top, err = storm.NewTopology(); err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	s.res.RPS = s.top.RPS
	s.nftRun = nft.Command(s.top.Edge.Command)
	if s.gen, err = storm.NewGenerator("auto", s.top.Storm, s.top.StormIfindex); err != nil {
		return fmt.Errorf("generator: %w", err)
	}
	s.res.Generator = s.gen.Name()
	if s.edge, s.pool, err = proc.StartEdge(s.opt.Self, s.top.Edge); err != nil {
		return fmt.Errorf("edge server: %w", err)
	}
	// The storms: e2e's few sources (16 per family, UDP, SYN and ICMP)
	// and its many forged ones (all of 198.19.0.0/16, 4M of
	// 2001:db8:1::/96), weighted so each forged source recurs alike.
	for _, p := range []storm.Proto{storm.UDP, storm.TCPSYN, storm.ICMP} {
		for _, f := range []storm.Flow{{Proto: p, First: storm.Few4, Count: 16}, {Proto: p, First: storm.Few6, Count: 16}} {
			t, err := s.template(f)
			if err != nil {
				return err
			}
			s.few = append(s.few, t)
		}
		many4, many6 := uint32(storm.MaxMany4), uint32(1<<22)
		for _, f := range []storm.Flow{{Proto: p, First: storm.Many4, Count: many4}, {Proto: p, First: storm.Many6, Count: many6}} {
			t, err := s.template(f)
			if err != nil {
				return err
			}
			s.many = append(s.many, t)
			s.manyW = append(s.manyW, float64(f.Count))
		}
	}
	return nil
}

func (s *study) template(f storm.Flow) (storm.Template, error) {
	dst := storm.Edge4
	if f.First.Is6() {
		dst = storm.Edge6
	}
	return storm.BuildTemplate(f, s.top.StormMAC, s.top.EdgeMAC, dst)
}

func (s *study) close() {
	if s.edge != nil {
		s.edge.Stop()
	}
	if s.gen != nil {
		s.gen.Close()
	}
	if s.top != nil {
		if err := s.top.Close(); err != nil {
			s.log.Warn("remove namespaces", logErr, err)
		}
	}
}

func (s *study) all(ctx context.Context) error {
	for run := range s.opt.Runs {
		// Rotate the order from run to run, so a drift of the shared
		// machine does not always fall on the same configuration.
		for i := range results.Configs {
			c := results.Configs[(i+run)%len(results.Configs)]
			if err := s.legit(ctx, run, c); err != nil {
				return fmt.Errorf("run %d, %s: %w", run+1, c.Name, err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		for _, src := range results.DropSources {
			for _, t := range dropOrder(run) {
				if err := s.drop(ctx, run, t, src); err != nil {
					return fmt.Errorf("run %d, drop capacity %s/%s: %w", run+1, t, src, err)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	if s.opt.Bench {
		s.bar.step("simulator benchmarks")
		rows, raw, err := simBench(ctx, s.opt.Quick)
		s.res.Bench, s.res.BenchRaw = rows, raw
		if err != nil {
			s.res.Notes = append(s.res.Notes, "simulator benchmarks not run: "+err.Error())
		}
	}
	return nil
}

// protection is what a configuration put on the edge; undo removes it.
type protection struct {
	sh    *shield.Shield
	links []link.Link
	nft   bool
	probe *probe.Probe
	noGRO bool // the storm link's GRO is off (generator alone)
}

func (s *study) protect(ctx context.Context, c results.Config, tableSize uint32) (*protection, error) {
	p := &protection{}
	ok := false
	defer func() {
		if !ok {
			s.undo(ctx, p)
		}
	}()
	switch c.Program {
	case "none":
	case "shield", "dryrun", "allowall", "shield-nopass":
		l := results.Limits()
		l.DryRun = c.Program == "dryrun"
		if c.Program == "shield-nopass" {
			l.Rate, l.Burst = 1, 1
		}
		sh, err := shield.Load(shield.Options{TableSize: tableSize, Limits: l})
		if err != nil {
			return nil, err
		}
		p.sh = sh
		if c.Program == "allowall" {
			if _, err := sh.Add(lists.AllowList, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}); err != nil {
				return nil, fmt.Errorf("allow all: %w", err)
			}
		}
		for _, idx := range []int{s.top.EdgeIfindex, s.top.FrontIfindex} {
			if err := s.top.Edge.Do(func() error {
				l, err := link.AttachXDP(link.XDPOptions{Program: sh.Program(), Interface: idx})
				if err == nil {
					p.links = append(p.links, l)
				}
				return err
			}); err != nil {
				return nil, fmt.Errorf("attach shield: %w", err)
			}
		}
	case "nft":
		rs, err := nft.Render(nft.Config{Ifaces: []string{storm.EdgeDev, storm.FrontDev}, TableSize: tableSize}.WithLimits(results.Limits()))
		if err != nil {
			return nil, err
		}
		if err := nft.Apply(ctx, s.nftRun, rs); err != nil {
			return nil, err
		}
		p.nft = true
	case "generator":
		if err := s.top.StormGRO(false); err != nil {
			return nil, fmt.Errorf("GRO off on the storm link: %w", err)
		}
		p.noGRO = true
	case "floor":
		prog, err := sim.DropProgram()
		if err != nil {
			return nil, fmt.Errorf("load XDP_DROP: %w", err)
		}
		defer prog.Close() // the link keeps it
		if err := s.top.Edge.Do(func() error {
			l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: s.top.EdgeIfindex})
			if err == nil {
				p.links = append(p.links, l)
			}
			return err
		}); err != nil {
			return nil, fmt.Errorf("attach XDP_DROP: %w", err)
		}
	default:
		return nil, fmt.Errorf("unknown program %q", c.Program)
	}
	if c.Probe {
		pr, err := probe.Load(probe.Options{Port: storm.EdgePort})
		if err != nil {
			return nil, err
		}
		if err := s.top.Edge.Do(func() error { return pr.Attach(s.top.FrontIfindex) }); err != nil {
			pr.Close()
			return nil, err
		}
		p.probe = pr
		s.res.ProbeMode = string(pr.Mode())
	}
	ok = true
	return p, nil
}

func (s *study) undo(ctx context.Context, p *protection) {
	if p.probe != nil {
		s.top.Edge.Do(p.probe.Close)
	}
	for _, l := range p.links {
		l.Close()
	}
	if p.sh != nil {
		p.sh.Close()
	}
	if p.noGRO {
		if err := s.top.StormGRO(true); err != nil {
			s.log.Warn("GRO back on on the storm link", logErr, err)
		}
	}
	if p.nft {
		if err := nft.Delete(ctx, s.nftRun, ""); err != nil {
			s.log.Warn("remove nftables twin", logErr, err)
		}
	}
}

// legit measures configuration c: a fixed-rate phase, then a saturation
// phase, the storm (if any) raging through both.
func (s *study) legit(ctx context.Context, run int, c results.Config) error {
	p, err := s.protect(ctx, c, 1<<16)
	if err != nil {
		return err
	}
	defer s.undo(ctx, p)
	var wg sync.WaitGroup
	sctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	var stormErr error
	var stormSent []uint64
	if c.Storm {
		spec := storm.Spec{Templates: s.few, Rate: s.opt.StormRate,
			Duration: 4*s.opt.Phase + 10*time.Second, MaxFrames: s.opt.StormRate * uint64((4*s.opt.Phase+10*time.Second)/time.Second)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stormSent, stormErr = storm.Run(sctx, s.gen, spec, nil)
		}()
		time.Sleep(200 * time.Millisecond) // the storm is on before the client starts
	}
	for _, ph := range []string{results.PhaseFixed, results.PhaseSaturation} {
		s.bar.step(fmt.Sprintf("run %d/%d %s %s", run+1, s.opt.Runs, c.Name, ph))
		smp, err := s.phase(ctx, c, ph, p)
		if err != nil {
			return err
		}
		smp.Run = run
		s.res.AddLegit(c, ph, smp)
	}
	cancel()
	wg.Wait()
	_ = stormSent
	if stormErr != nil && !errors.Is(stormErr, context.Canceled) {
		return fmt.Errorf("storm: %w", stormErr)
	}
	return nil
}

// phase runs the legitimate client in one phase and reads its figures.
func (s *study) phase(ctx context.Context, c results.Config, ph string, p *protection) (results.Sample, error) {
	cc := parts.DefaultClientConfig()
	if ph == results.PhaseSaturation {
		// Back to back on one kept-alive connection per family: the
		// client's loop goes on at once when late.
		cc = parts.ClientConfig{KeepAliveRate: 1e6, Timeout: cc.Timeout}
	}
	rec := &parts.Recorder{}
	cl := parts.StartClient(s.top.Storm, s.pool, cc, rec, storm.Front4, storm.Front6)
	defer cl.Stop()
	// Warm up: connections opened, neighbours resolved, the client's
	// first packets admitted.
	if err := sleep(ctx, 300*time.Millisecond); err != nil {
		return results.Sample{}, err
	}
	var src0 source.Source
	if p.sh != nil {
		src0, _, _ = p.sh.Source(storm.Client4)
	}
	if p.probe != nil {
		if err := p.probe.Reset(); err != nil {
			return results.Sample{}, err
		}
	}
	cpu0, err := s.edge.CPU()
	if err != nil {
		return results.Sample{}, err
	}
	rec.Switch(true)
	if err := sleep(ctx, s.opt.Phase); err != nil {
		return results.Sample{}, err
	}
	got := rec.Switch(false)
	cpu1, err := s.edge.CPU()
	if err != nil {
		return results.Sample{}, err
	}
	smp := results.SampleOf(got)
	smp.ServerCPU = cpu1.Proc - cpu0.Proc
	smp.SoftirqCPU = cpu1.Softirq - cpu0.Softirq
	if n := smp.Requests - smp.Failures; n > 0 {
		smp.CPUPerReqUs = (smp.ServerCPU + smp.SoftirqCPU) / float64(n) * 1e6
	}
	if p.sh != nil {
		if src1, ok, err := p.sh.Source(storm.Client4); err == nil && ok {
			smp.ClientPPS = float64(src1.Passed+src1.Dropped-src0.Passed-src0.Dropped) / smp.Seconds
			smp.ClientDropped = src1.Dropped - src0.Dropped
		}
	}
	if p.probe != nil {
		h, err := p.probe.Histogram()
		if err != nil {
			return smp, err
		}
		smp.Probe = &h
		// The client's keep-alive connections are the flows with many
		// requests; a new connection makes a handful (SYN, TLS, request).
		flows, err := p.probe.Flows()
		if err != nil {
			return smp, err
		}
		ka := new(probe.Histogram)
		for _, f := range flows {
			if f.Count >= results.KeepAliveFlow {
				ka.Add(f.Histogram)
			}
		}
		smp.ProbeKA = ka
	}
	return smp, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// drop measures one drop-capacity point: the generator at full speed for
// DropPhase against target, from few or many sources.
func (s *study) drop(ctx context.Context, run int, target, sources string) error {
	s.bar.step(fmt.Sprintf("run %d/%d drop capacity %s, %s sources", run+1, s.opt.Runs, target, sources))
	c := results.Config{Name: target, Program: target}
	p, err := s.protect(ctx, c, shield.DefaultTableSize)
	if err != nil {
		return err
	}
	defer s.undo(ctx, p)
	tpls, w := s.few, []float64(nil)
	if sources == "many" {
		tpls, w = s.many, s.manyW
	}
	var c0 counter.Counters
	if p.sh != nil {
		if c0, err = p.sh.Counters(); err != nil {
			return err
		}
	}
	d, edgeRx, err := s.dropPhase(ctx, run, tpls, w, s.opt.DropPhase, s.edge.CPU)
	if err != nil {
		return err
	}
	switch target {
	case "generator":
		// The link refuses them without counting them (no tx_dropped):
		// seen is what the edge's end received, which should be none.
		d.Seen = edgeRx
	case "floor":
		d.Dropped = d.Seen
	case "shield", "shield-nopass":
		c1, err := p.sh.Counters()
		if err != nil {
			return err
		}
		diff := c1.Sub(c0)
		d.Dropped = diff.Verdict(counter.Drop)
		d.Passed = diff.Verdict(counter.Pass)
		if n, err := p.sh.CountSources(ctx); err == nil {
			d.Tracked = n
		}
	case "nft":
		m, err := nft.ReadCounters(ctx, s.nftRun, "")
		if err != nil {
			return err
		}
		d.Dropped = m[nft.CounterAdmission] + m[nft.CounterLimit] + m[nft.CounterDeny] + m[nft.CounterSpoofed] + m[nft.CounterUnprotectedDrop]
		d.Passed = m[nft.CounterOK] + m[nft.CounterAllow] + m[nft.CounterUnprotectedPass]
		for _, set := range []string{"sources4", "sources6"} {
			if n, err := nft.SetSize(ctx, s.nftRun, "", set); err == nil {
				d.Tracked += n
			}
		}
	}
	d.Rates()
	s.res.AddDrop(target, sources, d)
	return nil
}

// dropPhase sends tpls (weights w) at full speed for phase, lets the ring
// drain, and returns what every drop-capacity cell measures alike: frames
// sent, refused by the storm link, seen by the edge, the CPU time read
// (the edge server's process too with s.edge.CPU, the machine alone with
// s.edge.Machine), and the frames the edge's end received (edgeRx).
func (s *study) dropPhase(ctx context.Context, run int, tpls []storm.Template, w []float64, phase time.Duration, read func() (proc.CPUReading, error)) (d results.DropSample, edgeRx uint64, err error) {
	v0, err := s.top.VethStats()
	if err != nil {
		return d, 0, err
	}
	cpu0, err := read()
	if err != nil {
		return d, 0, err
	}
	start := time.Now()
	per, err := fullSpeed(ctx, s.gen, tpls, w, phase)
	secs := time.Since(start).Seconds()
	if err != nil {
		return d, 0, err
	}
	if err := sleep(ctx, 300*time.Millisecond); err != nil { // the ring drains
		return d, 0, err
	}
	cpu1, err := read()
	if err != nil {
		return d, 0, err
	}
	v1, err := s.top.VethStats()
	if err != nil {
		return d, 0, err
	}
	d = results.DropSample{Run: run, Seconds: secs}
	for _, n := range per {
		d.Sent += n
	}
	d.Refused = v1.Storm.TxDropped - v0.Storm.TxDropped
	d.Seen = d.Sent - min(d.Refused, d.Sent)
	d.SoftirqCPU = cpu1.Softirq - cpu0.Softirq
	d.BusyCPU = cpu1.Busy - cpu0.Busy
	return d, v1.Edge.RxPackets - v0.Edge.RxPackets, nil
}

// bigChunk is the most frames one generator call sends at full speed: a
// live-frames run costs about 28 ms besides its frames (e2e's chunk of
// 65,536 frames per call is sized for pacing and lets that fixed cost
// dominate), so drop capacity is measured with calls of half a million
// frames (0.1-0.5 s each here).
const bigChunk = 1 << 19

// fullSpeed sends tpls in turn, in shares w (nil: equal), as fast as the
// generator goes, for d; it returns the frames sent per template.
func fullSpeed(ctx context.Context, g storm.Generator, tpls []storm.Template, w []float64, d time.Duration) ([]uint64, error) {
	if w == nil {
		w = make([]float64, len(tpls))
		for i := range w {
			w[i] = 1
		}
	}
	var most float64
	for _, x := range w {
		most = max(most, x)
	}
	per := make([]uint64, len(tpls))
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for i := range tpls {
			n := max(uint32(float64(bigChunk)*w[i]/most), 1<<12)
			got, err := g.Send(&tpls[i], n)
			per[i] += got
			if err != nil {
				return per, err
			}
			if !time.Now().Before(deadline) {
				break
			}
		}
	}
	return per, nil
}

func newResults(opt Options) *results.Results {
	return &results.Results{
		Started:      time.Now().UTC(),
		Command:      opt.Command,
		Revision:     results.Revision(),
		Kernel:       kernel.Release(),
		CPUModel:     results.CPUModel(),
		Cores:        runtime.NumCPU(),
		Quick:        opt.Quick,
		Runs:         opt.Runs,
		PhaseSeconds: opt.Phase.Seconds(),
		DropSeconds:  opt.DropPhase.Seconds(),
		StormRate:    opt.StormRate,
		Limits:       results.Limits(),
		Defaults:     results.StudyDefaults(),
		LoadStart:    results.LoadAvg(),
	}
}
