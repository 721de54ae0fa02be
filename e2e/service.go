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
	"strings"
	"syscall"

	"github.com/cilium/ebpf/link"

	"xdpshield/shield"
	"xdpshield/shield/service"
)

// stormPinPrefix starts the name of every storm's temporary pin root
// under /sys/fs/bpf; the suffix is the pid of the run.
const stormPinPrefix = "xdpshield-storm-"

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// startService runs `shield serve`'s own wiring (shield/service) for edge0
// inside the edge namespace: a temporary pin root on bpffs, the lock, the
// configured limits and lists, and the API with a token (reads included),
// bound on the edge namespace's loopback. The client link edge1 runs the
// service's program too, attached here: the service protects one interface
// (one pin directory, one lock), and edge1 shares its program and maps, so
// one set of counters and buckets sees both links as before.
func (r *run) startService() error {
	removeStalePins(r.log)
	r.pins = filepath.Join("/sys/fs/bpf", stormPinPrefix+strconv.Itoa(os.Getpid()))
	if err := shield.EnsureBPFFS(r.pins); err != nil {
		return fmt.Errorf("pin root: %w", err)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	r.token = hex.EncodeToString(tok)
	host := func(as ...netip.Addr) []netip.Prefix {
		var ps []netip.Prefix
		for _, a := range as {
			ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
		}
		return ps
	}
	cfg := service.Config{
		Iface:     EdgeDev,
		PinRoot:   r.pins,
		TableSize: r.cfg.TableSize,
		Limits:    r.cfg.Limits,
		Allow:     host(Allowed4, Allowed6),
		Deny:      host(Denied4, Denied6),
		API: service.API{Listen: "127.0.0.1:0", Token: r.token, TokenSource: "storm", AuthReads: true,
			NoProcessMetrics: true},
	}
	if err := r.top.Edge.Do(func() error {
		var err error
		r.svc, err = service.Start(context.Background(), cfg, r.log)
		return err
	}); err != nil {
		return fmt.Errorf("shield service on %s in %s: %w", EdgeDev, r.top.Edge.Name, err)
	}
	r.sh = r.svc.Shield()
	r.xdp = append(r.xdp, closerFunc(r.svc.Attachment().Detach))
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

// stopService stops the service and removes its pins (link and maps) and
// the temporary pin root.
func (r *run) stopService() {
	if r.svc != nil {
		if err := r.svc.Close(); err != nil {
			r.log.Warn("stop shield service", logErr, err)
		}
	}
	if r.pins != "" {
		if err := r.top.Edge.Do(func() error { return shield.Detach(r.pins, EdgeDev) }); err != nil {
			r.log.Warn("remove the storm's pins", logErr, err)
		}
		os.RemoveAll(r.pins)
	}
}

// removeStalePins removes the pin roots of storms whose process is gone
// (killed before it could clean up). Only names this package makes are
// touched, and only on bpffs.
func removeStalePins(log interface{ Warn(string, ...any) }) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/bpf", stormPinPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), stormPinPrefix))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		// Its namespaces, and so its interfaces and links, died with it.
		if err := os.RemoveAll(d); err != nil {
			log.Warn("remove a dead storm's pins", logErr, err)
		}
	}
}
