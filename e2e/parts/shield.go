package parts

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/service"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// stormPinPrefix starts the name of every storm's temporary pin root
// under /sys/fs/bpf; the suffix is the pid of the run.
const stormPinPrefix = "xdpshield-storm-"

// StartShield runs `shield serve`'s own wiring (service) for edge0
// inside the edge namespace, with a temporary pin root on bpffs.
func (Local) StartShield(top *storm.Topology, cfg service.Config) (ShieldSide, error) {
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
	if err := l.edge.Do(func() error { return pin.Detach(l.pins, storm.EdgeDev) }); err != nil {
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
