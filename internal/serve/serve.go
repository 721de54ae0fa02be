package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/cli"
	svc "github.com/xdpshield/xdpshield/service"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// Log attribute keys of the command's own logs (the service logs its
// lifecycle itself: service).
const (
	keyIface  = "iface"
	keyPinDir = "pin_dir"
	keyErr    = cli.KeyErr
	keyKeys   = "keys"
)

func runServe(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "configuration file (TOML; see docs/shield.example.toml)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	iface := fs.String("iface", "", "interface to protect")
	mode := fs.String("mode", "", "XDP mode: auto (native, else generic), native or generic")
	dispatcher := fs.Bool("dispatcher", false, "run as one program of libxdp's multi-program dispatcher, beside xdp-loader's and xdp-filter's (docs/operating.md)")
	listen := fs.String("listen", "", "API address (default "+api.DefaultListen+")")
	tokenFile := fs.String("token-file", "", "file holding the operator token (mode 0600); without one the API is read-only")
	pinRoot := fs.String("pin-root", "", "bpffs directory for pins, one subdirectory per interface (default "+pin.DefaultPinRoot+")")
	tableSize := fs.Uint("table-size", 0, fmt.Sprintf("capacity of the per-source table, a power of two (default %d)", shield.DefaultTableSize))
	logFormat := fs.String("log-format", "", "text or json (default text)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate: the API speaks HTTPS (with -tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM private key of -tls-cert")
	adoptPins := fs.Bool("adopt-pins", false, "adopt pins that cannot be shown to be this network namespace's (kernels before 5.14 give no namespace cookie)")
	adminDir := fs.String("admin-dir", "", "directory of the admin socket the CLI uses locally (default "+svc.DefaultAdminDir+")")
	wb := fs.Bool("workbench", false, "serve the live page under /workbench/ (docs/workbench.md)")
	expose := fs.Bool("dangerously-expose-api", false, "serve a non-loopback -listen without TLS or without the token on reads")
	// Hidden: the container lane proves a capability is needed by the
	// kernel's refusal, not only by this check.
	noCapCheck := os.Getenv("SHIELD_NO_CAP_CHECK") == "1"
	if err := e.Parse(fs, args); err != nil {
		return cli.HelpOK(err)
	}
	if fs.NArg() > 0 {
		return cli.Usagef("serve: unexpected arguments %q", fs.Args())
	}
	if *logFormat != "" {
		e.LogFormat = *logFormat
	}
	// load reads the file and lays the flags over it (again on SIGHUP).
	load := func() (config, settings, error) {
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return cfg, settings{}, err
		}
		if *logFormat == "" {
			e.LogFormat = cfg.Log.Format
		}
		// fromFlag: the keys a flag set, whose errors name no line.
		fromFlag := map[string]bool{}
		fs.Visit(func(f *flag.Flag) {
			fromFlag[flagKeys[f.Name]] = true
			switch f.Name {
			case "iface":
				cfg.Iface = *iface
			case "mode":
				cfg.Mode = *mode
			case "dispatcher":
				cfg.Dispatcher = *dispatcher
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
			case "tls-cert":
				cfg.API.TLSCert = *tlsCert
			case "tls-key":
				cfg.API.TLSKey = *tlsKey
			case "admin-dir":
				cfg.API.AdminDir = *adminDir
			case "dangerously-expose-api":
				cfg.API.DangerouslyExpose = *expose
			case "workbench":
				cfg.Workbench.Enabled = *wb
			}
		})
		set, err := cfg.validate()
		if err != nil {
			return cfg, set, fmt.Errorf("invalid configuration:\n%w", placeErrors(*cfgPath, err, fromFlag))
		}
		return cfg, set, nil
	}
	cfg, set, err := load()
	if err != nil {
		return err
	}
	if *check {
		printCheck(e.Stdout, *cfgPath, cfg, set)
		return nil
	}
	if !noCapCheck {
		if err := checkCaps(cfg.PinRoot, cfg.Iface); err != nil {
			return err
		}
	}
	log := cli.NewLogger(os.Stderr, cfg.Log.Format, cfg.Log.Level)
	sc := serviceConfig(e, cfg, set)
	sc.AdoptUnverifiedPins = *adoptPins
	return serve(ctx, log, sc, func() (svc.Config, error) {
		if *cfgPath == "" {
			// Flags alone: reloading them would only put the defaults
			// back over limits changed through the API.
			return svc.Config{}, errors.New("serve was started without -config: there is no file to reload")
		}
		cfg, set, err := load()
		if err != nil {
			return svc.Config{}, err
		}
		return serviceConfig(e, cfg, set), nil
	})
}

// flagKeys are the configuration keys serve's flags set.
var flagKeys = map[string]string{"iface": "iface", "mode": "mode", "dispatcher": "dispatcher", "listen": "api.listen", "token-file": "api.token_file",
	"pin-root": "pin_root", "table-size": "table_size", "log-format": "log.format", "tls-cert": "api.tls_cert",
	"tls-key": "api.tls_key", "admin-dir": "api.admin_dir", "dangerously-expose-api": "api.dangerously_expose",
	"workbench": "workbench.enabled"}

func tokenState(path string) string {
	if path == "" {
		return "none (read-only API)"
	}
	return path
}

// serve runs the service (service) until ctx is done, telling systemd
// when it is ready and that it is alive (notify.go), and applying the
// configuration reload returns on SIGHUP.
func serve(ctx context.Context, log *slog.Logger, sc svc.Config, reload func() (svc.Config, error)) error {
	// Before anything: SIGHUP's default action ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	s, err := svc.Start(ctx, sc, log)
	if err != nil {
		return err
	}
	defer s.Close()
	sdNotify(log, "READY=1\nSTATUS=protecting "+s.Attachment().Iface)
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	var alive <-chan time.Time
	if every := watchdogEvery(log); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		alive = t.C
	}
	for {
		select {
		case err := <-done:
			sdNotify(log, "STOPPING=1")
			return err
		case <-hup:
			sdNotify(log, "RELOADING=1\nMONOTONIC_USEC="+daemon.SdNotifyMonotonicUsec())
			next, err := reload()
			if err == nil {
				err = s.Reload(svc.Reload{Limits: next.Limits, Allow: next.Allow, Deny: next.Deny})
			}
			if err != nil {
				log.Error("reload refused; nothing was changed", keyErr, err)
				sdNotify(log, "READY=1\nSTATUS=reload refused (see the log); protecting "+s.Attachment().Iface)
				continue
			}
			if keys := restartOnly(sc, next); len(keys) > 0 {
				log.Warn("reloaded the limits and lists; these changes take effect at the next restart", keyKeys, keys)
			}
			log.Info("reloaded: limits and lists applied", keyIface, s.Attachment().Iface)
			sdNotify(log, "READY=1\nSTATUS=protecting "+s.Attachment().Iface)
		case <-alive:
			// Alive means the program's maps still answer, not only that
			// this loop runs.
			if _, err := s.Shield().Counters(); err != nil {
				log.Error("watchdog: counters unreadable; not telling systemd we are alive", keyErr, err)
				continue
			}
			sdNotify(log, "WATCHDOG=1")
		}
	}
}

// serviceConfig is the validated configuration in the service's types.
func serviceConfig(e *cli.Env, cfg config, set settings) svc.Config {
	return svc.Config{
		Iface:             cfg.Iface,
		Mode:              set.mode,
		Dispatcher:        cfg.Dispatcher,
		RunPrio:           uint32(cfg.RunPriority),
		PinRoot:           cfg.PinRoot,
		TableSize:         uint32(cfg.TableSize),
		Clock:             set.clock,
		Limits:            set.limits,
		Allow:             set.allow,
		Deny:              set.deny,
		SpoofOwnAddresses: cfg.Lists.OwnAddressesSpoofed,
		API:               cfg.apiConfig(set.token),
		Build:             api.BuildInfo{Version: e.Version, Revision: e.Revision},
		LB:                cfg.LB,
		L7:                cfg.L7,
		XDPLB:             cfg.XDPLB,
		Chain:             cfg.Chain,
		Workbench:         cfg.workbenchConfig(set.credential),
	}
}
