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

	"xdpshield/l7"
	"xdpshield/lb"
	"xdpshield/shield"
	"xdpshield/shield/api"
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
)

// Config is a service's whole configuration, in the types it uses
// (cmd/shield turns the TOML file and the flags into one).
type Config struct {
	// Iface is the interface to protect, in the caller's network namespace.
	Iface string
	// Mode is how XDP is attached (shield.ModeAuto: native, else generic).
	Mode shield.Mode
	// PinRoot is the bpffs directory of the pins (shield.DefaultPinRoot
	// when empty).
	PinRoot string
	// TableSize is the sources table's capacity (shield.DefaultTableSize
	// when zero); a pinned table keeps its own.
	TableSize uint32
	// Clock is the program's time source.
	Clock shield.Clock
	// Limits apply to a fresh attach (zero: shield.DefaultLimits); adopted
	// pins keep theirs.
	Limits shield.Limits
	// Allow and Deny are put on the lists at start (listed ones are kept).
	Allow, Deny []netip.Prefix
	// SpoofOwnAddresses marks this namespace's addresses as the machine's
	// own (shield.WatchOwn, following netlink while the service runs): a
	// frame from the wire claiming one as its source is dropped as
	// spoofed. Never on a loopback interface, where the machine talks to
	// itself; when off (or on loopback) a pinned own set is cleared.
	SpoofOwnAddresses bool
	// API configures the HTTP API.
	API API
	// Build labels shield_build_info and /v1/info.
	Build api.BuildInfo
	// LB is the socket balancer's configuration (none without services).
	LB lb.Config
	// L7 is the L7 proxy and its fast path ([l7]; none when empty).
	L7 l7.Section
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
}

// Service is a running shield service: the shield attached to one interface
// and its API serving.
type Service struct {
	cfg  Config
	log  *slog.Logger
	att  *shield.Attachment
	lb   *lb.Started // nil without [[lb.service]]
	l7   *l7.Server  // nil without [l7]
	ln   net.Listener
	hs   *http.Server
	done chan struct{} // closed when the API server has stopped
	err  error         // why it stopped, when it failed

	stopOwn context.CancelFunc // ends WatchOwn

	health    health
	detached  atomic.Bool   // Detach was called
	stop      chan struct{} // closed by Close: stops the watcher
	watchDone chan struct{}
	// filterDone is closed when keepFilter's loop has ended.
	filterDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg, binds the API listener, attaches the shield to
// cfg.Iface, applies the configured lists and serves the API, all in the
// caller's network namespace. Nothing is attached when the configuration or
// the listener fails. The service runs until ctx is done or Close is
// called; Wait waits for it.
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
		cfg.Limits = shield.DefaultLimits()
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
	// The listener first: an address that cannot be served must not leave
	// a program attached with no API to manage it.
	ln, err := listen(cfg.API)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (nothing was attached): %w", cfg.API.Listen, err)
	}
	// The namespace the service runs in: the watcher re-attaches there.
	ns, err := netns.Get()
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("current network namespace: %w", err)
	}
	s := &Service{cfg: cfg, log: log, ln: ln, done: make(chan struct{}), stop: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			ln.Close()
			ns.Close()
			if s.att != nil {
				s.att.Close()
			}
			s.lb.Close()
			s.l7.Close()
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
			s.shutdown()
		case <-s.done:
		}
	}()
	return s, nil
}

func (s *Service) attach() error {
	cfg := s.cfg
	// Return traffic comes back to the ports the edge's connections are
	// opened from: this namespace's, the interface's (the service runs in
	// it).
	eph, err := shield.LocalPortRange()
	if err != nil {
		return fmt.Errorf("%w (nothing was attached)", err)
	}
	a, err := shield.Attach(shield.AttachOptions{
		Iface:   cfg.Iface,
		Mode:    cfg.Mode,
		PinRoot: cfg.PinRoot,
		Load:    shield.Options{TableSize: cfg.TableSize, Clock: cfg.Clock, Limits: cfg.Limits, Ephemeral: eph},
	})
	if err != nil {
		if errors.Is(err, shield.ErrLocked) {
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
		s.log.Info("attached", keyIface, a.Iface, keyMode, a.Mode.String(), keyPinDir, a.PinDir,
			keyLinkID, a.LinkID, keyProg, a.Program, keyTable, sh.TableSize(), keyLimits, sh.Limits(), keyVersion, cfg.Build.Version)
	}
	s.log.Info("return traffic: to these ephemeral ports, opening no connection", keyIface, a.Iface, keyPorts, sh.Ephemeral().String())
	return nil
}

func (s *Service) applyLists() error {
	if err := applyList(s.log, s.att.Shield, shield.AllowList, s.cfg.Allow); err != nil {
		return err
	}
	return applyList(s.log, s.att.Shield, shield.DenyList, s.cfg.Deny)
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
	err = sh.WatchOwn(ctx, func(ch shield.OwnChange) {
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
		L7:               s.l7,
		Info: api.Info{Iface: a.Iface, Mode: a.Mode.String(), PinDir: a.PinDir, LinkID: uint32(a.LinkID),
			ProgramID: uint32(a.Program), Adopted: a.Adopted, Version: cfg.Build.Version},
	})
	topTimeout := cfg.API.TopTimeout
	if topTimeout <= 0 {
		topTimeout = api.DefaultTopTimeout
	}
	s.hs = httpServer(srv, topTimeout+WriteTimeout, s.log)
	go func() {
		err := s.hs.Serve(s.ln)
		if !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("api server: %w", err)
		}
		close(s.done)
	}()
	addr := s.ln.Addr().String()
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

// Attachment is what shield.Attach returned: interface, pins, link, mode.
func (s *Service) Attachment() *shield.Attachment { return s.att }

// Addr is the address the API listens on.
func (s *Service) Addr() net.Addr { return s.ln.Addr() }

// Wait blocks until the service stops: nil after ctx was done or Close was
// called, the API server's error when it failed.
func (s *Service) Wait() error {
	<-s.done
	return s.err
}

// shutdown stops the API server, letting requests in flight finish (5 s).
func (s *Service) shutdown() {
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
		s.shutdown()
		<-s.done
		if s.stopOwn != nil {
			s.stopOwn()
		}
		close(s.stop)
		<-s.watchDone
		if s.filterDone != nil {
			<-s.filterDone
		}
		s.closeErr = errors.Join(s.l7.Close(), s.lb.Close(), s.att.Close())
		s.log.Info("stopped; the program stays attached through the pinned link (shield detach removes it)",
			keyIface, s.att.Iface, keyPinDir, s.att.PinDir)
	})
	return s.closeErr
}

// applyList puts the configured prefixes on list l (already listed ones are
// kept) and logs what it added.
func applyList(log *slog.Logger, sh *shield.Shield, l shield.List, ps []netip.Prefix) error {
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
