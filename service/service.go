package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/l7"
	"github.com/xdpshield/xdpshield/l7/policy"
	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/lb/lbconf"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/ownaddr"
	"github.com/xdpshield/xdpshield/shield/pin"
	"github.com/xdpshield/xdpshield/workbench"
	"github.com/xdpshield/xdpshield/xdplb"
)

// Log attribute keys of the service's lifecycle logs.
const (
	keyIface     = "iface"
	keyMode      = "mode"
	keyPinDir    = "pin_dir"
	keyLinkID    = "link_id"
	keyProg      = "program_id"
	keyOldProg   = "old_program_id"
	keyTable     = "table_size"
	keyListen    = "listen"
	keyLimits    = "limits"
	keyConfig    = "configured"
	keyNote      = "note"
	keyWho       = "who"
	keyWhat      = "what"
	keyItems     = "prefixes"
	keyOld       = "old"
	keyNew       = "new"
	keyErr       = "err"
	keyVersion   = "version"
	keyPorts     = "ports"
	keyToken     = "token"
	keyAuthReads = "auth_reads"
	keyIndex     = "ifindex"
	keyOldIndex  = "old_ifindex"
	keyTLS       = "tls"
	keyAddrs     = "addresses"
	keyAdded     = "added"
	keyRemoved   = "removed"
	keyAdmin     = "admin_socket"
)

// Config is a service's whole configuration, in the types it uses
// (cmd/shield turns the TOML file and the flags into one).
type Config struct {
	// Iface is the interface to protect, in the caller's network namespace.
	Iface string
	// Mode is how XDP is attached (pin.ModeAuto: native, else generic).
	Mode pin.Mode
	// Dispatcher runs the shield as one program of libxdp's dispatcher
	// at RunPrio (pin.AttachOptions).
	Dispatcher bool
	RunPrio    uint32
	// PinRoot is the bpffs directory of the pins (pin.DefaultPinRoot
	// when empty).
	PinRoot string
	// AdoptUnverifiedPins adopts pins that cannot be shown to be this
	// namespace's on a kernel without namespace cookies (before 5.14).
	AdoptUnverifiedPins bool
	// TableSize is the sources table's capacity (shield.DefaultTableSize
	// when zero); a pinned table keeps its own.
	TableSize uint32
	// Clock is the program's time source.
	Clock config.Clock
	// Limits apply to a fresh attach (zero: config.DefaultLimits); adopted
	// pins keep theirs.
	Limits config.Limits
	// Allow and Deny are put on the lists at start (listed ones are kept).
	Allow, Deny []netip.Prefix
	// SpoofOwnAddresses marks this namespace's addresses as the machine's
	// own (ownaddr.Watch, following netlink while the service runs): a
	// frame from the wire claiming one as its source is dropped as
	// spoofed. Never on a loopback interface, where the machine talks to
	// itself; when off (or on loopback) a pinned own set is cleared.
	SpoofOwnAddresses bool
	// API configures the HTTP API.
	API API
	// Build labels shield_build_info and /v1/info.
	Build api.BuildInfo
	// LB is the socket balancer's configuration (none without services).
	LB lbconf.Config
	// L7 is the L7 proxy and its fast path ([l7]; none when empty).
	L7 policy.Section
	// XDPLB is the XDP balancer behind the shield ([xdplb]; none without
	// VIPs).
	XDPLB xdplb.Config
	// Chain is a pinned XDP program (its bpffs path) the shield passes
	// frames on to: the shield judges first, and what it passes runs
	// through Chain, whose verdict stands. It takes the shield's one
	// `next` slot, so it excludes [xdplb] VIPs.
	Chain string
	// Workbench is the live page ([workbench]; off unless Enabled).
	Workbench Workbench
}

// Workbench configures the live page served under workbench.Prefix beside
// the API. Off, the API serves exactly its own routes.
type Workbench struct {
	Enabled bool
	// Config: its Token is the API's (set by the service).
	workbench.Config
}

// API configures the service's HTTP API.
type API struct {
	// Listen is the TCP address (api.DefaultListen when empty; port 0
	// picks a free one, see Service.Addr).
	Listen string
	// Token is the operator token; empty makes the API read-only.
	Token string
	// TokenSource names where the token came from, for the logs.
	TokenSource string
	// AuthReads makes reads need the token too.
	AuthReads bool
	// MaxBody and TopTimeout: see api.Options (zero: their defaults).
	MaxBody    int64
	TopTimeout time.Duration
	// TLSCert and TLSKey are PEM files; with them the API speaks HTTPS.
	TLSCert, TLSKey string
	// DangerouslyExpose serves an address beyond loopback without a
	// token on reads or without TLS (ValidateAPI refuses it otherwise).
	DangerouslyExpose bool
	// NoProcessMetrics leaves the Go and process collectors out of
	// /metrics (several services in one process).
	NoProcessMetrics bool
	// AdminDir, when set, is the directory (only the service's user may
	// write it) of the admin socket, which serves the API beside Listen
	// and which the CLI uses locally (AdminSocket, DialAdmin).
	AdminDir string
}

// Service is a running shield service: the shield attached to one interface
// and its API serving.
type Service struct {
	cfg      Config
	log      *slog.Logger
	att      *pin.Attachment
	lb       *lb.Started     // nil without [[lb.service]]
	l7       *l7.Server      // nil without [l7]
	xdplb    *xdplb.Balancer // nil without [xdplb] VIPs
	mu       sync.Mutex
	reloadMu sync.Mutex   // one Reload at a time
	ln       net.Listener // the TCP listener; nil while its address is taken
	adm      net.Listener // the admin socket, when API.AdminDir is set
	hs       *http.Server
	quit     chan struct{} // closed by Close: the API stops
	errc     chan error    // a listener's failure
	wg       sync.WaitGroup
	done     chan struct{} // closed when the API server has stopped
	err      error         // why it stopped, when it failed
	quitOnce sync.Once

	stopOwn context.CancelFunc // ends ownaddr.Watch
	stopWB  func()             // stops the workbench's storm, if any

	health    health
	detached  atomic.Bool   // Detach was called
	stop      chan struct{} // closed by Close: stops the watcher
	watchDone chan struct{}
	// filterDone is closed when keepFilter's loop has ended.
	filterDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg, binds the admin socket, attaches the shield to
// cfg.Iface, applies the configured lists and serves the API, all in the
// caller's network namespace. Nothing is attached when the configuration or
// the admin socket fails. An API address that cannot be bound (another
// process holds it) does not leave the edge unprotected: the shield is
// attached, the failure logged as an ERROR ("API DOWN"), and the address
// tried again every APIRetry (issue 23, finding 4). The service runs until
// ctx is done or Close is called; Wait waits for it.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.TableSize == 0 {
		cfg.TableSize = shield.DefaultTableSize
	}
	if cfg.API.Listen == "" {
		cfg.API.Listen = api.DefaultListen
	}
	if cfg.Limits.IsZero() {
		cfg.Limits = config.DefaultLimits()
	}
	// The limits are checked by shield.Load (through Attach), before
	// anything is attached.
	if err := ValidateAPI(cfg.API); err != nil {
		return nil, err
	}
	// On a loopback interface the program would limit the service's own
	// API: one change (an allow entry deleted, limits of 1) locks the
	// operator out, with nothing left to undo it through.
	if ifc, err := net.InterfaceByName(cfg.Iface); err == nil && ifc.Flags&net.FlagLoopback != 0 {
		return nil, fmt.Errorf("iface %s is a loopback interface: the shield would limit its own API there (nothing was attached)", cfg.Iface)
	}
	s := &Service{cfg: cfg, log: log, done: make(chan struct{}), stop: make(chan struct{}),
		quit: make(chan struct{}), errc: make(chan error, 1)}
	// The admin socket first: its directory is the service's own, and a
	// failure there is a configuration's (another serve on this port).
	if cfg.API.AdminDir != "" {
		adm, path, err := listenAdmin(cfg.API.AdminDir, cfg.API.Listen)
		switch {
		case errors.Is(err, errNoAdminDir):
			log.Error("no admin socket: the CLI cannot reach this service locally", keyErr, err)
		case err != nil:
			return nil, fmt.Errorf("%w (nothing was attached)", err)
		default:
			s.adm = newGuard(adm, log)
			log.Info("admin socket", keyListen, path)
		}
	}
	// The namespace the service runs in: the watcher re-attaches there.
	ns, err := netns.Get()
	if err != nil {
		if s.adm != nil {
			s.adm.Close()
		}
		return nil, fmt.Errorf("current network namespace: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			if s.adm != nil {
				s.adm.Close()
			}
			ns.Close()
			if s.att != nil {
				s.att.Close()
			}
			s.lb.Close()
			s.l7.Close()
			s.closeXDPLB()
		}
	}()
	// The L7 proxy's address too, before anything is attached.
	if err := s.listenL7(); err != nil {
		return nil, err
	}
	if err := s.attach(); err != nil {
		return nil, err
	}
	if err := s.applyLists(); err != nil {
		return nil, err
	}
	if err := s.ownAddresses(); err != nil {
		return nil, err
	}
	if err := s.startLB(); err != nil {
		return nil, err
	}
	if err := s.startXDPLB(); err != nil {
		return nil, err
	}
	s.startL7()
	if err := s.watch(ns); err != nil {
		return nil, err
	}
	s.keepFilter()
	s.serve()
	ok = true
	go func() {
		select {
		case <-ctx.Done():
		case <-s.quit:
		case err := <-s.errc:
			s.err = err
		}
		s.quitOnce.Do(func() { close(s.quit) })
		s.shutdown()
		s.wg.Wait()
		close(s.done)
	}()
	return s, nil
}

func (s *Service) attach() error {
	cfg := s.cfg
	// Return traffic comes back to the ports the edge's connections are
	// opened from: this namespace's, the interface's (the service runs in
	// it).
	eph, err := config.LocalPortRange()
	if err != nil {
		return fmt.Errorf("%w (nothing was attached)", err)
	}
	a, err := pin.Attach(pin.AttachOptions{
		Iface:           cfg.Iface,
		Mode:            cfg.Mode,
		PinRoot:         cfg.PinRoot,
		AdoptUnverified: cfg.AdoptUnverifiedPins,
		Dispatcher:      cfg.Dispatcher,
		RunPrio:         cfg.RunPrio,
		Load:            shield.Options{TableSize: cfg.TableSize, Clock: cfg.Clock, Limits: cfg.Limits, Ephemeral: eph},
	})
	if err != nil {
		if errors.Is(err, pin.ErrLocked) {
			return fmt.Errorf("another shield serve is already running on %s: %w", cfg.Iface, err)
		}
		return err
	}
	s.att = a
	sh := a.Shield
	for _, n := range a.Notes {
		s.log.Warn("attach", keyIface, a.Iface, keyNote, n)
	}
	if a.Adopted {
		s.log.Info("adopted pinned shield; program replaced through the link", keyIface, a.Iface, keyMode, a.Mode.String(),
			keyPinDir, a.PinDir, keyLinkID, a.LinkID, keyOldProg, a.OldProgram, keyProg, a.Program,
			keyTable, sh.TableSize(), keyVersion, cfg.Build.Version)
		if got := sh.Limits(); !got.Equal(cfg.Limits) {
			s.log.Warn("pinned limits kept; the configured ones are ignored (change them with PUT /v1/limits)",
				keyIface, a.Iface, keyLimits, got, keyConfig, cfg.Limits)
		}
	} else {
		if a.Dispatcher {
			s.log.Info("joined libxdp's dispatcher", keyIface, a.Iface, "slot", a.Slot, "run_priority", cfg.RunPrio)
		}
		s.log.Info("attached", keyIface, a.Iface, keyMode, a.Mode.String(), keyPinDir, a.PinDir,
			keyLinkID, a.LinkID, keyProg, a.Program, keyTable, sh.TableSize(), keyLimits, sh.Limits(), keyVersion, cfg.Build.Version)
	}
	s.log.Info("return traffic: to these ephemeral ports, opening no connection", keyIface, a.Iface, keyPorts, sh.Ephemeral().String())
	return nil
}

func (s *Service) applyLists() error {
	if err := applyList(s.log, s.att.Shield, lists.AllowList, s.cfg.Allow); err != nil {
		return err
	}
	return applyList(s.log, s.att.Shield, lists.DenyList, s.cfg.Deny)
}

// ownAddresses marks the namespace's addresses as own and keeps them so
// until Close, or clears the own set when that is off or the interface is
// loopback.
func (s *Service) ownAddresses() error {
	sh := s.att.Shield
	ifc, err := net.InterfaceByName(s.att.Iface)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", s.att.Iface, err)
	}
	if !s.cfg.SpoofOwnAddresses || ifc.Flags&net.FlagLoopback != 0 {
		_, removed, err := sh.SetOwn(nil)
		if err != nil {
			return fmt.Errorf("clear own addresses: %w", err)
		}
		if len(removed) > 0 {
			s.log.Info("own addresses cleared", keyIface, s.att.Iface, keyAddrs, removed)
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopOwn = cancel
	err = ownaddr.Watch(ctx, sh, func(ch ownaddr.Change) {
		if ch.Err != nil {
			s.log.Warn("own addresses", keyIface, s.att.Iface, keyErr, ch.Err)
			return
		}
		s.log.Info("own addresses changed", keyIface, s.att.Iface, keyAdded, ch.Added, keyRemoved, ch.Removed)
	})
	if err != nil {
		return fmt.Errorf("own addresses: %w", err)
	}
	own, err := sh.Own()
	if err == nil {
		s.log.Info("own addresses: frames from the wire claiming them are dropped as spoofed", keyIface, s.att.Iface, keyAddrs, own)
	}
	return nil
}

func (s *Service) serve() {
	a, cfg := s.att, s.cfg
	if cfg.API.Token == "" {
		s.log.Warn("no operator token (-token-file): the API refuses every change", keyIface, a.Iface)
	}
	srv := api.NewServer(a.Shield, api.Options{
		Token:            cfg.API.Token,
		AuthReads:        cfg.API.AuthReads,
		MaxBody:          cfg.API.MaxBody,
		TopTimeout:       cfg.API.TopTimeout,
		Logger:           s.log.With(keyIface, a.Iface),
		Build:            cfg.Build,
		NoProcessMetrics: cfg.API.NoProcessMetrics,
		Health:           s.Healthy,
		LB:               s.LB(),
		XDPLB:            s.xdplb,
		L7:               s.l7,
		Info: api.Info{Iface: a.Iface, Mode: a.Mode.String(), PinDir: a.PinDir, LinkID: uint32(a.LinkID),
			ProgramID: uint32(a.Program), Adopted: a.Adopted, Version: cfg.Build.Version},
	})
	topTimeout := cfg.API.TopTimeout
	if topTimeout <= 0 {
		topTimeout = api.DefaultTopTimeout
	}
	h, authed, stopWB := Handler(srv, a.Shield, cfg, s.log.With(keyIface, a.Iface))
	s.stopWB = stopWB
	s.hs = httpServer(gate(h, authed), topTimeout+WriteTimeout, s.log)
	if s.adm != nil {
		s.serveOn(s.adm)
	}
	addr := cfg.API.Listen
	if ln, err := listen(cfg.API, s.log); err != nil {
		s.log.Error("API DOWN: cannot listen on "+cfg.API.Listen+" (another process holds it?); the shield protects "+a.Iface+
			" all the same; retrying every "+APIRetry.String(), keyListen, cfg.API.Listen, keyErr, err, keyAdmin, s.adminPath())
		s.wg.Add(1)
		go s.retryListen()
	} else {
		s.mu.Lock()
		s.ln = ln
		s.mu.Unlock()
		s.serveOn(ln)
		addr = ln.Addr().String()
	}
	if keys := readableSecrets(cfg); len(keys) > 0 {
		s.log.Warn("the L7 policy's header values are readable by any local user through GET /v1/l7/policy (api.auth_reads is off): "+
			"set api.auth_reads = true if they are secrets", keyWhat, keys)
	}
	if exposed(cfg.API) {
		s.log.Error("DANGER: the API listens beyond loopback without a token on reads or without TLS (api.dangerously_expose)",
			keyListen, addr, keyToken, cfg.API.Token != "", keyAuthReads, cfg.API.AuthReads, keyTLS, cfg.API.TLSCert != "")
	}
	src := cfg.API.TokenSource
	if cfg.API.Token == "" {
		src = "none (read-only API)"
	}
	s.log.Info("serving", keyIface, a.Iface, keyListen, addr, keyToken, src)
}

// Shield is the attached shield.
func (s *Service) Shield() *shield.Shield { return s.att.Shield }

// Attachment is what pin.Attach returned: interface, pins, link, mode.
func (s *Service) Attachment() *pin.Attachment { return s.att }

// APIRetry is how often a service whose API address was taken tries it
// again.
const APIRetry = 5 * time.Second

// serveOn serves the API on ln until the service stops.
func (s *Service) serveOn(ln net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			select {
			case s.errc <- fmt.Errorf("api server: %w", err):
			default:
			}
		}
	}()
}

// retryListen binds the API's address once it is free, logging an ERROR
// each minute it is not.
func (s *Service) retryListen() {
	defer s.wg.Done()
	t := time.NewTicker(APIRetry)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		ln, err := listen(s.cfg.API, s.log)
		if err != nil {
			if time.Since(last) >= time.Minute {
				s.log.Error("API DOWN: still cannot listen on "+s.cfg.API.Listen, keyErr, err, keyAdmin, s.adminPath())
				last = time.Now()
			}
			continue
		}
		s.mu.Lock()
		s.ln = ln
		s.mu.Unlock()
		s.log.Info("API up: listening on "+ln.Addr().String(), keyListen, ln.Addr().String())
		s.serveOn(ln)
		return
	}
}

func (s *Service) adminPath() string {
	if s.adm == nil {
		return "none"
	}
	return s.adm.Addr().String()
}

// Addr is the address the API listens on; nil while it could not be
// bound.
func (s *Service) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// AdminAddr is the admin socket's address (nil without API.AdminDir).
func (s *Service) AdminAddr() net.Addr {
	if s.adm == nil {
		return nil
	}
	return s.adm.Addr()
}

// Wait blocks until the service stops: nil after ctx was done or Close was
// called, the API server's error when it failed.
func (s *Service) Wait() error {
	<-s.done
	return s.err
}

// shutdown stops the API server, letting requests in flight finish (5 s).
func (s *Service) shutdown() {
	s.att.Shield.StopCapture() // a capture in flight ends now, its flag off
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.hs.Shutdown(sctx); err != nil {
		s.log.Warn("api shutdown", keyErr, err)
		s.hs.Close()
	}
}

// Close stops the API and releases the lock and this process's handles.
// The program stays attached through the pinned link and the maps keep the
// state (Detach removes the link).
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.quitOnce.Do(func() { close(s.quit) })
		<-s.done
		if s.stopWB != nil {
			s.stopWB()
		}
		if s.stopOwn != nil {
			s.stopOwn()
		}
		close(s.stop)
		<-s.watchDone
		if s.filterDone != nil {
			<-s.filterDone
		}
		s.closeErr = errors.Join(s.l7.Close(), s.lb.Close(), s.closeXDPLB(), s.att.Close())
		s.log.Info("stopped; the program stays attached through the pinned link (shield detach removes it)",
			keyIface, s.att.Iface, keyPinDir, s.att.PinDir)
	})
	return s.closeErr
}

// applyList puts the configured prefixes on list l (already listed ones are
// kept) and logs what it added.
func applyList(log *slog.Logger, sh *shield.Shield, l lists.List, ps []netip.Prefix) error {
	if len(ps) == 0 {
		return nil
	}
	ch, err := sh.Add(l, ps)
	if err != nil {
		return fmt.Errorf("%s list: %w", l, err)
	}
	if len(ch.Added) > 0 {
		log.Info("list changed", keyWho, "config", keyWhat, l.String()+" add", keyItems, ch.Added,
			keyOld, ch.Before, keyNew, len(ch.After))
	}
	return nil
}

// readableSecrets names the L7 policy's values a reader of the API sees
// when reads need no token: set_header's value and the RBAC rules'
// header values, which are often credentials (issue 23, finding 9).
func readableSecrets(cfg Config) []string {
	if cfg.API.AuthReads || !cfg.L7.Enabled() {
		return nil
	}
	var keys []string
	if cfg.L7.SetHeader.Value != "" {
		keys = append(keys, "l7.set_header.value")
	}
	for i, r := range cfg.L7.RBAC {
		if r.Value != "" {
			keys = append(keys, fmt.Sprintf("l7.rbac[%d].value", i))
		}
	}
	return keys
}

// Handler is what the service serves: the API alone, or with the workbench
// enabled, the page under workbench.Prefix and the API everywhere else.
// authed says whether a request is the operator's or a signed-in
// visitor's (the connection guard keeps its slot); stop ends what the
// workbench runs (a storm), once nothing is served.
func Handler(srv *api.Server, src workbench.Source, cfg Config, log *slog.Logger) (h http.Handler, authed func(*http.Request) bool, stop func()) {
	if !cfg.Workbench.Enabled {
		return srv, srv.Authenticated, func() {}
	}
	wc := cfg.Workbench.Config
	wc.Token = cfg.API.Token
	wc.Logger = log
	wb := workbench.New(src, wc)
	log.Info("workbench enabled", keyListen, workbench.Prefix, "anonymous_view", !wc.NoAnonymous)
	mux := http.NewServeMux()
	mux.Handle(workbench.Prefix, wb)
	mux.Handle("/", srv)
	return mux, func(r *http.Request) bool { return srv.Authenticated(r) || wb.SignedIn(r) }, wb.Close
}
