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

// Section is the [l7] section of shield serve's configuration: where the
// proxy listens, whether the fast path is tried, and the policy
// ([[l7.route]], [[l7.rbac]], hash_header, [l7.set_header]).
type Section struct {
	// Listen is the proxy's TCP address (IP:port), in serve's namespace.
	Listen string `toml:"listen"`
	// FastPath is "auto" (or empty): load the kernel's fast path when the
	// kernel can run it, else the proxy alone serves; "off": the proxy
	// alone.
	FastPath string `toml:"fast_path"`
	Config
}

// Enabled reports whether the section says anything: an empty [l7] (or
// none) runs no proxy.
func (s Section) Enabled() bool {
	return s.Listen != "" || s.FastPath != "" || len(s.Routes) > 0 || len(s.RBAC) > 0 ||
		s.HashHeader != "" || s.SetHeader != (Header{})
}

// Validate checks the section whole (the policy included) and returns every
// problem, each naming its key; a section that says nothing is valid.
func (s Section) Validate() error {
	if !s.Enabled() {
		return nil
	}
	var errs []error
	if s.Listen == "" {
		errs = append(errs, errors.New("l7.listen: empty (the proxy's IP:port)"))
	} else if ap, err := netip.ParseAddrPort(s.Listen); err != nil || ap.Port() == 0 {
		errs = append(errs, fmt.Errorf("l7.listen: %q is not IP:port with a port", s.Listen))
	}
	switch s.FastPath {
	case "", "auto", "off":
	default:
		errs = append(errs, fmt.Errorf("l7.fast_path: %q, want auto or off", s.FastPath))
	}
	if err := s.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Server is the proxy of a Section, bound by Listen and served by Start,
// with the fast path when the kernel runs it.
type Server struct {
	sec    Section
	policy *Policy
	px     *Proxy
	ln     net.Listener
	hs     *http.Server
	log    *slog.Logger
	done   chan struct{}

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
func Listen(sec Section, dial Dialer) (*Server, error) {
	if !sec.Enabled() {
		return nil, nil
	}
	if err := sec.Validate(); err != nil {
		return nil, err
	}
	p, err := Compile(sec.Config)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", sec.Listen)
	if err != nil {
		return nil, fmt.Errorf("l7: listen on %s: %w", sec.Listen, err)
	}
	return &Server{sec: sec, policy: p, px: NewProxy(p, dial), ln: ln, done: make(chan struct{})}, nil
}

// Start loads the fast path (unless the section turns it off) and serves.
// A kernel that cannot run the fast path is no error: the proxy alone
// serves, and Status and the log say why.
func (s *Server) Start(log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	s.log = log
	s.mu.Lock()
	if s.sec.FastPath == "off" {
		s.why = "l7.fast_path = off"
	} else if fp, err := Attach(s.px, log); err != nil {
		s.why = err.Error()
	} else {
		s.fp = fp
	}
	s.started = true
	fp, why := s.fp, s.why
	s.mu.Unlock()
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
			keyListen, addr, keyRoutes, len(s.policy.routes), keyRules, len(s.policy.rules), keyWhy, why)
	case !fp.Enabled:
		log.Warn("l7 proxy serving; fast path attached but the policy is not held in the kernel: every request goes to the proxy",
			keyListen, addr, keyRoutes, len(s.policy.routes), keyRules, len(s.policy.rules), keyWhy, fp.Why)
	default:
		log.Info("l7 proxy serving with the fast path", keyListen, addr, keyRoutes, len(s.policy.routes),
			keyRules, len(s.policy.rules), keyFast, true)
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
	// Reasons are the fast path's counters by reason (nil without it).
	Reasons map[string]uint64
}

// RouteStatus is one route and its counts: Fast requests the kernel
// redirected to a backend, Slow those the proxy forwarded, Class the
// response codes by class of the proxy's (the kernel does not parse
// responses).
type RouteStatus struct {
	Route
	Fast, Slow uint64
	Class      [6]uint64
}

// RuleStatus is one RBAC rule and the requests it denied (403).
type RuleStatus struct {
	Rule
	Denied uint64
}

// Status reads the counters.
func (s *Server) Status() (Status, error) {
	s.mu.Lock()
	fp, why := s.fp, s.why
	s.mu.Unlock()
	st := Status{Listen: s.ln.Addr().String(), FastWhy: why}
	pc := s.px.Counters()
	var fc FastCounters
	if fp != nil {
		var err error
		if fc, err = fp.Counters(); err != nil {
			return st, err
		}
		st.Fast, st.KernelPolicy, st.KernelPolicyWhy = true, fp.Enabled, fp.Why
		st.Reasons = map[string]uint64{}
		for r := Reason(0); r < numReasons; r++ {
			st.Reasons[r.String()] = fc.Reasons[r]
		}
	} else {
		st.KernelPolicyWhy = "no fast path"
	}
	for i, rt := range s.policy.routes {
		st.Routes = append(st.Routes, RouteStatus{Route: rt.Route, Fast: fc.Routes[i],
			Slow: pc.Routes[i].Requests, Class: pc.Routes[i].Class})
	}
	for i, ru := range s.policy.rules {
		st.Rules = append(st.Rules, RuleStatus{Rule: ru.Rule, Denied: pc.Denied[i]})
	}
	st.NoRoute = pc.NoRoute
	return st, nil
}

// RuleName is a rule's name, or rbac[i] for a rule without one.
func RuleName(r Rule, i int) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("rbac[%d]", i)
}

// Section is the configuration the server runs.
func (s *Server) Section() Section { return s.sec }
