package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"log/slog"

	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/internal/topo"

	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/service"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// stormPinPrefix starts the name of every storm's temporary pin root
// under /sys/fs/bpf; the suffix is the pid of the run.
const stormPinPrefix = "xdpshield-storm-"

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// StormServiceConfig is the service configuration of a storm: the
// configured limits and table size, the probes' addresses on the allow and
// deny lists, and the API with token (reads included) on loopback. Iface,
// PinRoot and API.Listen are the deployment's to fill.
func StormServiceConfig(cfg Config, token string) service.Config {
	host := func(as ...netip.Addr) []netip.Prefix {
		var ps []netip.Prefix
		for _, a := range as {
			ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
		}
		return ps
	}
	return service.Config{
		Iface:     EdgeDev,
		TableSize: cfg.TableSize,
		Limits:    cfg.Limits,
		Allow:     host(Allowed4, Allowed6),
		Deny:      host(Denied4, Denied6),
		// As serve does by default: frames claiming the edge's addresses are spoofed.
		SpoofOwnAddresses: true,
		API: service.API{Listen: "127.0.0.1:0", Token: token, TokenSource: "storm", AuthReads: true,
			NoProcessMetrics: true},
	}
}

// newToken makes an operator token.
func newToken() (string, error) {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(tok), nil
}

// startService starts the deployment's shield service and attaches its
// program to the client link edge1 too: the service protects one interface
// (one pin directory, one lock), and edge1 shares its program and maps, so
// one set of counters and buckets sees both links.
func (r *run) startService() error {
	var err error
	if r.token, err = newToken(); err != nil {
		return err
	}
	if r.svc, err = r.dep.StartShield(r.top, StormServiceConfig(r.cfg, r.token)); err != nil {
		return fmt.Errorf("shield service on %s in %s: %w", EdgeDev, r.top.Edge.Name, err)
	}
	r.sh = r.svc.Shield()
	r.xdp = append(r.xdp, closerFunc(r.svc.Detach))
	if err := r.top.Edge.Do(func() error {
		l, err := link.AttachXDP(link.XDPOptions{Program: r.sh.Program(), Interface: r.top.FrontIfindex})
		if err == nil {
			r.xdp = append(r.xdp, l)
		}
		return err
	}); err != nil {
		return fmt.Errorf("attach shield to %s in %s: %w", FrontDev, r.top.Edge.Name, err)
	}
	return nil
}

// StartShield runs `shield serve`'s own wiring (service) for edge0
// inside the edge namespace, with a temporary pin root on bpffs.
func (Local) StartShield(top *Topology, cfg service.Config) (ShieldSide, error) {
	log := slog.Default()
	removeStalePins(log)
	l := &localShield{edge: top.Edge, log: log}
	l.pins = filepath.Join("/sys/fs/bpf", stormPinPrefix+strconv.Itoa(os.Getpid()))
	if err := pinfs.EnsureBPFFS(l.pins); err != nil {
		return nil, fmt.Errorf("pin root: %w", err)
	}
	cfg.PinRoot = l.pins
	if err := top.Edge.Do(func() error {
		var err error
		l.svc, err = service.Start(context.Background(), cfg, log)
		return err
	}); err != nil {
		os.RemoveAll(l.pins)
		return nil, err
	}
	return l, nil
}

type localShield struct {
	edge *topo.NS
	log  *slog.Logger
	svc  *service.Service
	pins string // the service's temporary pin root
}

func (l *localShield) Shield() *shield.Shield { return l.svc.Shield() }
func (l *localShield) APIAddr() string        { return l.svc.Addr().String() }
func (l *localShield) Detach() error          { return l.svc.Attachment().Detach() }

// Close stops the service and removes its pins (link and maps) and the
// temporary pin root.
func (l *localShield) Close() error {
	err := l.svc.Close()
	if err := l.edge.Do(func() error { return pin.Detach(l.pins, EdgeDev) }); err != nil {
		l.log.Warn("remove the storm's pins", logErr, err)
	}
	os.RemoveAll(l.pins)
	return err
}

// removeStalePins removes the pin roots of storms whose process is gone
// (killed before it could clean up). Only names this package makes are
// touched, and only on bpffs.
func removeStalePins(log interface{ Warn(string, ...any) }) {
	for _, d := range topo.StaleDirs("/sys/fs/bpf", stormPinPrefix) {
		// Its namespaces, and so its interfaces and links, died with it.
		if err := os.RemoveAll(d); err != nil {
			log.Warn("remove a dead storm's pins", logErr, err)
		}
	}
}
