package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"time"

	"xdpshield/shield"
	"xdpshield/shield/api"
)

// Log attribute keys of the service's lifecycle logs.
const (
	keyIface   = "iface"
	keyMode    = "mode"
	keyPinDir  = "pin_dir"
	keyLinkID  = "link_id"
	keyProg    = "program_id"
	keyOldProg = "old_program_id"
	keyTable   = "table_size"
	keyListen  = "listen"
	keyLimits  = "limits"
	keyConfig  = "configured"
	keyNote    = "note"
	keyWho     = "who"
	keyWhat    = "what"
	keyItems   = "prefixes"
	keyOld     = "old"
	keyNew     = "new"
	keyErr     = "err"
	keyVersion = "version"
	keyToken   = "token_file"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var (
	version  = "dev"
	revision = "unknown"
)

func init() {
	commands["serve"] = command{"attach the shield to an interface and serve its API", runServe}
}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "configuration file (TOML; see docs/shield.example.toml)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	iface := fs.String("iface", "", "interface to protect")
	mode := fs.String("mode", "", "XDP mode: auto (native, else generic), native or generic")
	listen := fs.String("listen", "", "API address (default "+api.DefaultListen+")")
	tokenFile := fs.String("token-file", "", "file holding the operator token (mode 0600); without one the API is read-only")
	pinRoot := fs.String("pin-root", "", "bpffs directory for pins, one subdirectory per interface (default "+shield.DefaultPinRoot+")")
	tableSize := fs.Uint("table-size", 0, fmt.Sprintf("capacity of the per-source table (default %d)", shield.DefaultTableSize))
	logFormat := fs.String("log-format", "", "text or json (default text)")
	if err := fs.Parse(args); err != nil {
		return helpOK(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "iface":
			cfg.Iface = *iface
		case "mode":
			cfg.Mode = *mode
		case "listen":
			cfg.API.Listen = *listen
		case "token-file":
			cfg.API.TokenFile = *tokenFile
		case "pin-root":
			cfg.PinRoot = *pinRoot
		case "table-size":
			cfg.TableSize = uint64(*tableSize)
		case "log-format":
			cfg.Log.Format = *logFormat
		}
	})
	set, err := cfg.validate()
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	if *check {
		fmt.Fprintf(stdout, "configuration OK: iface %s, mode %s, table %d, api %s, token %s, limits %+v, allow %d (+own addresses: %v), deny %d\n",
			cfg.Iface, set.mode, cfg.TableSize, cfg.API.Listen, tokenState(cfg.API.TokenFile), set.limits,
			len(set.allow), cfg.Lists.AllowOwnAddresses, len(set.deny))
		return nil
	}
	log := newLogger(os.Stderr, cfg.Log.Format, cfg.Log.Level)
	return serve(ctx, log, cfg, set)
}

func tokenState(path string) string {
	if path == "" {
		return "none (read-only API)"
	}
	return path
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(level))
	o := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

func serve(ctx context.Context, log *slog.Logger, cfg config, set settings) error {
	a, err := shield.Attach(shield.AttachOptions{
		Iface:   cfg.Iface,
		Mode:    set.mode,
		PinRoot: cfg.PinRoot,
		Load:    shield.Options{TableSize: uint32(cfg.TableSize), Clock: set.clock, Limits: set.limits},
	})
	if err != nil {
		if errors.Is(err, shield.ErrLocked) {
			return fmt.Errorf("another shield serve is already running on %s: %w", cfg.Iface, err)
		}
		return err
	}
	defer a.Close()
	sh := a.Shield
	for _, n := range a.Notes {
		log.Warn("attach", keyIface, a.Iface, keyNote, n)
	}
	if a.Adopted {
		log.Info("adopted pinned shield; program replaced through the link", keyIface, a.Iface, keyMode, a.Mode.String(),
			keyPinDir, a.PinDir, keyLinkID, a.LinkID, keyOldProg, a.OldProgram, keyProg, a.Program,
			keyTable, sh.TableSize(), keyVersion, version)
		if got := sh.Limits(); !got.Equal(set.limits) {
			log.Warn("pinned limits kept; the configured ones are ignored (change them with PUT /v1/limits)",
				keyIface, a.Iface, keyLimits, got, keyConfig, set.limits)
		}
	} else {
		log.Info("attached", keyIface, a.Iface, keyMode, a.Mode.String(), keyPinDir, a.PinDir,
			keyLinkID, a.LinkID, keyProg, a.Program, keyTable, sh.TableSize(), keyLimits, sh.Limits(), keyVersion, version)
	}

	allow := slices.Clone(set.allow)
	if cfg.Lists.AllowOwnAddresses {
		own, err := ownAddresses()
		if err != nil {
			return err
		}
		allow = append(allow, own...)
	}
	if err := applyList(log, sh, shield.AllowList, allow); err != nil {
		return err
	}
	if err := applyList(log, sh, shield.DenyList, set.deny); err != nil {
		return err
	}

	if set.token == "" {
		log.Warn("no operator token (-token-file): the API refuses every change", keyIface, a.Iface)
	}
	srv := api.NewServer(sh, api.Options{
		Token:      set.token,
		AuthReads:  cfg.API.AuthReads,
		MaxBody:    cfg.API.MaxBodyBytes,
		TopTimeout: cfg.API.TopTimeout.Duration,
		Logger:     log.With(keyIface, a.Iface),
		Build:      api.BuildInfo{Version: version, Revision: revision},
		Info: api.Info{Iface: a.Iface, Mode: a.Mode.String(), PinDir: a.PinDir, LinkID: uint32(a.LinkID),
			ProgramID: uint32(a.Program), Adopted: a.Adopted, Version: version},
	})
	ln, err := net.Listen("tcp", cfg.API.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (the program stays attached): %w", cfg.API.Listen, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil && !ap.Addr().IsLoopback() && !cfg.API.AuthReads {
		log.Warn("the API listens beyond loopback and reads need no token (api.auth_reads = true closes them)",
			keyListen, ln.Addr().String())
	}
	log.Info("serving", keyIface, a.Iface, keyListen, ln.Addr().String(), keyToken, tokenState(cfg.API.TokenFile))

	select {
	case <-ctx.Done():
	case err := <-done:
		return fmt.Errorf("api server: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("api shutdown", keyErr, err)
	}
	log.Info("stopped; the program stays attached through the pinned link (shield detach removes it)",
		keyIface, a.Iface, keyPinDir, a.PinDir)
	return nil
}

// applyList puts the configured prefixes on list l (already listed ones are
// kept) and logs what it added.
func applyList(log *slog.Logger, sh *shield.Shield, l shield.List, ps []netip.Prefix) error {
	if len(ps) == 0 {
		return nil
	}
	before, err := sh.List(l)
	if err != nil {
		return err
	}
	if _, err := sh.Add(l, ps); err != nil {
		return fmt.Errorf("%s list: %w", l, err)
	}
	after, err := sh.List(l)
	if err != nil {
		return err
	}
	var added []string
	for _, p := range after {
		if !slices.Contains(before, p) {
			added = append(added, p.String())
		}
	}
	if len(added) > 0 {
		log.Info("list changed", keyWho, "config", keyWhat, l.String()+" add", keyItems, added,
			keyOld, len(before), keyNew, len(after))
	}
	return nil
}

// ownAddresses lists this machine's addresses (in the service's network
// namespace) as host prefixes: the operator is never limited when talking
// from the machine itself.
func ownAddresses() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list own addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out, nil
}
