package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/service"
)

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// StormServiceConfig is the service configuration of a storm: the
// configured limits and table size, the listed sources' addresses on the allow and
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
		Iface:     storm.EdgeDev,
		TableSize: cfg.TableSize,
		Limits:    cfg.Limits,
		Allow:     host(storm.Allowed4, storm.Allowed6),
		Deny:      host(storm.Denied4, storm.Denied6),
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
		return fmt.Errorf("shield service on %s in %s: %w", storm.EdgeDev, r.top.Edge.Name, err)
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
		return fmt.Errorf("attach shield to %s in %s: %w", storm.FrontDev, r.top.Edge.Name, err)
	}
	return nil
}
