package l7

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/xdpshield/xdpshield/l7/internal/sock"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// Log attribute keys of the server's lifecycle.
const (
	keyListen = "listen"
	keyRoutes = "routes"
	keyRules  = "rules"
	keyFast   = "fast_path"
	keyWhy    = "why"
	keyErr    = "err"
)

// Server is the proxy of a Section, bound by Listen and served by Start,
// with the fast path when the kernel runs it.
type Server struct {
	px    *Proxy
	ln    net.Listener
	local []netip.Addr // the namespace's addresses when Listen bound ln (loops; Replace reads them anew)
	hs    *http.Server
	log   *slog.Logger
	done  chan struct{}

	// pmu orders policy changes (Replace, write) against reads of the
	// policy with its counters (Status, read).
	pmu     sync.RWMutex
	sec     policy.Section
	gen     uint64 // policy generation: 1 at start, +1 a change
	refused uint64 // policy changes refused

	opt Options // the fast path's (Attach)

	mu      sync.Mutex
	fp      *FastPath // nil: the proxy alone
	why     string    // why the fast path does not run
	started bool
	err     error // why serving stopped, when it failed
}

// Listen validates sec whole, compiles its policy and binds its address;
// nothing is attached or served yet (Start). The proxy dials backends with
// dial (nil: the default dialer, in the caller's namespace). It returns
// nil, nil for a section that says nothing.
func Listen(sec policy.Section, dial Dialer, opts ...Option) (*Server, error) {
	if !sec.Enabled() {
		return nil, nil
	}
	if err := sec.Validate(); err != nil {
		return nil, err
	}
	local := sock.LocalAddrs()
	if err := policy.Loops(netip.MustParseAddrPort(sec.Listen), sec.Config, local); err != nil {
		return nil, err
	}
	p, err := policy.Compile(sec.Config)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", sec.Listen)
	if err != nil {
		return nil, fmt.Errorf("l7: listen on %s: %w", sec.Listen, err)
	}
	s := &Server{sec: sec, gen: 1, px: NewProxy(p, dial), ln: ln, local: local, done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Option is an option of Listen.
type Option func(*Server)

// WithFastPath makes Start attach the fast path with opt (the zero Options
// without it).
func WithFastPath(opt Options) Option { return func(s *Server) { s.opt = opt } }

// Start loads the fast path (unless the section turns it off) and serves.
// A kernel that cannot run the fast path is no error: the proxy alone
// serves, and Status and the log say why.
func (s *Server) Start(log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	// A policy change waits for the fast path's first policy, and writes
	// what is read here of it (Replace): all is read under pmu.
	s.pmu.Lock()
	s.log = log
	s.mu.Lock()
	if s.sec.FastPath == "off" {
		s.why = "l7.fast_path = off"
	} else if fp, err := Attach(s.px, log, s.opt); err != nil {
		s.why = err.Error()
	} else {
		s.fp = fp
	}
	s.started = true
	fp, why := s.fp, s.why
	s.mu.Unlock()
	var kernelPolicy bool
	if fp != nil {
		kernelPolicy, why = fp.Enabled, fp.Why
	}
	p := s.px.Policy()
	s.pmu.Unlock()
	s.hs = s.px.Server()
	s.hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	go func() {
		err := s.px.Serve(s.hs, s.ln)
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	}()
	addr := s.ln.Addr().String()
	switch {
	case fp == nil:
		log.Warn("l7 proxy serving without the fast path: the Go proxy alone enforces the policy",
			keyListen, addr, keyRoutes, len(p.Routes()), keyRules, len(p.Rules()), keyWhy, why)
	case !kernelPolicy:
		log.Warn("l7 proxy serving; fast path attached but the policy is not held in the kernel: every request goes to the proxy",
			keyListen, addr, keyRoutes, len(p.Routes()), keyRules, len(p.Rules()), keyWhy, why)
	default:
		log.Info("l7 proxy serving with the fast path", keyListen, addr, keyRoutes, len(p.Routes()),
			keyRules, len(p.Rules()), keyFast, true)
	}
}

// Addr is the address the proxy listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the proxy (requests in flight get 5 s) and unloads the fast
// path. Safe on nil and on a Server never started.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		return s.ln.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if err := s.hs.Shutdown(ctx); err != nil {
		errs = append(errs, s.hs.Close())
	}
	<-s.done
	s.pmu.Lock() // no policy change writes a fast path being closed
	defer s.pmu.Unlock()
	s.mu.Lock()
	if s.err != nil {
		errs = append(errs, fmt.Errorf("l7 proxy: %w", s.err))
	}
	if s.fp != nil {
		errs = append(errs, s.fp.Close())
		s.fp = nil
		s.why = "stopped"
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// Status is the proxy's state and counters (GET /v1/l7).
type Status struct {
	Listen string
	// Fast says whether the kernel's fast path is attached; FastWhy why
	// not. KernelPolicy says whether the policy is held in the kernel
	// (with Fast false or KernelPolicy false every request goes to the
	// proxy); KernelPolicyWhy why not.
	Fast            bool
	FastWhy         string
	KernelPolicy    bool
	KernelPolicyWhy string
	Routes          []RouteStatus
	Rules           []RuleStatus
	NoRoute         uint64
	// Generation is the policy's: 1 as started, one more each change
	// (Replace); Refused counts the changes refused.
	Generation uint64
	Refused    uint64
	// Dropped counts pooled sockets of backends a change dropped.
	Dropped uint64
	// Unjoined counts connections the fast path could not take (its
	// table full, or no memory): the proxy alone served them.
	Unjoined uint64
	// Policy is the policy in force, read with the counts.
	Policy policy.Config
	// Reasons are the fast path's counters by reason (nil without it).
	Reasons map[string]uint64
}

// RouteStatus is one route and its counts: Fast requests the kernel
// redirected to a backend, Slow those the proxy forwarded, Class the
// response codes by class of the proxy's (the kernel does not parse
// responses).
type RouteStatus struct {
	policy.Route
	Fast, Slow uint64
	Class      [6]uint64
}

// RuleStatus is one RBAC rule and the requests it denied (403).
type RuleStatus struct {
	policy.Rule
	Denied uint64
}

// Status reads the counters. Routes and rules are those of the policy in
// force; a route keeps its counts across a change that keeps its name, one
// a change drops is no longer reported.
func (s *Server) Status() (Status, error) {
	s.pmu.RLock()
	defer s.pmu.RUnlock()
	s.mu.Lock()
	fp, why := s.fp, s.why
	s.mu.Unlock()
	st := Status{Listen: s.ln.Addr().String(), FastWhy: why, Generation: s.gen, Refused: s.refused, Policy: s.sec.Config}
	p, pc := s.px.counters()
	var fc FastCounters
	if fp != nil {
		var err error
		if fc, err = fp.Counters(); err != nil {
			return st, err
		}
		st.Fast, st.KernelPolicy, st.KernelPolicyWhy = true, fp.Enabled, fp.Why
		st.Dropped = fp.dropped.Load()
		st.Unjoined = fp.unjoined.Load()
		st.Reasons = map[string]uint64{}
		for r := Reason(0); r < numReasons; r++ {
			st.Reasons[r.String()] = fc.Reasons[r]
		}
	} else {
		st.KernelPolicyWhy = "no fast path"
	}
	for i, rt := range p.Routes() {
		rs := RouteStatus{Route: rt.Route, Slow: pc.Routes[i].Requests, Class: pc.Routes[i].Class}
		if fp != nil {
			rs.Fast = fp.routeFast(p, i, fc)
		}
		st.Routes = append(st.Routes, rs)
	}
	for i, ru := range p.Rules() {
		st.Rules = append(st.Rules, RuleStatus{Rule: ru.Rule, Denied: pc.Denied[i]})
	}
	st.NoRoute = pc.NoRoute
	return st, nil
}

// Section is the configuration the server runs: the policy in force.
func (s *Server) Section() policy.Section {
	s.pmu.RLock()
	defer s.pmu.RUnlock()
	return s.sec
}

// ErrInvalidPolicy wraps the validation errors of a policy Replace refuses.
var ErrInvalidPolicy = errors.New("invalid l7 policy")

// Replace makes c the policy of the proxy and of the fast path, validated
// whole first: a c with an error (wrapping ErrInvalidPolicy, every problem
// named) changes nothing. Each request is judged by the old policy or by
// c, never by parts of both: the proxy swaps its compiled policy at once,
// and the kernel passes every request to the proxy while its maps are
// rewritten (swap.go). Backends c drops lose their pooled sockets; those
// it adds get theirs as before, lazily. It returns the policy replaced and
// the new generation. Nothing of it outlives the process: a restart serves
// the configuration file's [l7] again.
func (s *Server) Replace(c policy.Config) (old policy.Config, gen uint64, err error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	prev := s.px.Policy()
	p, err := policy.CompileFrom(c, prev)
	if err == nil {
		// The namespace's addresses now: one added since Listen is the
		// proxy's too.
		local, ok := sock.ListenerAddrs(s.ln)
		if !ok {
			local = s.local
		}
		err = policy.Loops(netip.MustParseAddrPort(s.sec.Listen), c, local)
	}
	if err != nil {
		s.refused++
		return policy.Config{}, s.gen, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	s.mu.Lock()
	fp := s.fp
	s.mu.Unlock()
	if fp == nil {
		s.px.swap(p)
	} else {
		fp.polMu.Lock()
		defer fp.polMu.Unlock()
		if err := fp.hold(); err != nil {
			// Nothing changed but, at worst, the kernel passing every
			// request to the proxy, which still holds the old policy.
			return policy.Config{}, s.gen, fmt.Errorf("l7 policy change: %w", err)
		}
		s.px.swap(p)
		if err := fp.install(prev, p); err != nil {
			fp.Enabled, fp.Why = false, fmt.Sprintf("a policy change failed to write the kernel's maps (every request goes to the proxy): %v", err)
			if s.log != nil {
				s.log.Error("l7 policy change: the kernel's maps were not all written; the proxy alone enforces the new policy", keyErr, err)
			}
		}
	}
	old = s.sec.Config
	s.sec.Config = c
	s.gen++
	return old, s.gen, nil
}
