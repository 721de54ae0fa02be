package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"xdpshield/internal/topo"
	"xdpshield/shield"
	"xdpshield/shield/api"
)

// newAPIProber runs the service's HTTP API in-process on a loopback listener
// inside the edge namespace, as `shield serve` would beside the edge, and
// probes it with the service's own client: GET /v1/counters, whose answer
// must also show the table within its capacity.
func newAPIProber(sh *shield.Shield, edge *topo.NS) (*apiProber, error) {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	h := api.NewServer(sh, api.Options{
		Token:            hex.EncodeToString(tok),
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		NoProcessMetrics: true,
	})
	var ln net.Listener
	if err := edge.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen for the api in %s: %w", edge.Name, err)
	}
	p := &apiProber{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second},
		client: &api.Client{
			Base: "http://" + ln.Addr().String(),
			HTTP: &http.Client{Transport: &http.Transport{DialContext: dialer(edge), MaxIdleConnsPerHost: 1}},
		},
	}
	go func() {
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("api server", logErr, err)
		}
	}()
	return p, nil
}

type apiProber struct {
	srv    *http.Server
	client *api.Client
}

func (p *apiProber) Name() string { return "GET /v1/counters" }

func (p *apiProber) Probe(ctx context.Context) error {
	r, err := p.client.Counters(ctx)
	if err != nil {
		return err
	}
	if r.Sources.Capacity == 0 || r.Sources.Tracked > int(r.Sources.Capacity) {
		return fmt.Errorf("api reports %d sources tracked, capacity %d", r.Sources.Tracked, r.Sources.Capacity)
	}
	return nil
}

func (p *apiProber) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return p.srv.Shutdown(ctx)
}
