package e2e

import (
	"context"
	"fmt"
	"net/http"

	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// newAPIProber probes the service's HTTP API (bound in the edge namespace at
// addr, reads behind the token) with the service's own client, dialling from
// inside the edge namespace: GET /v1/counters, whose answer must also show
// the table within its capacity.
func newAPIProber(addr, token string, edge *topo.NS) *apiProber {
	return &apiProber{client: &client.Client{
		Base:     "http://" + addr,
		Token:    token,
		Operator: "storm",
		HTTP:     &http.Client{Transport: &http.Transport{DialContext: dialer(edge), MaxIdleConnsPerHost: 1}},
	}}
}

type apiProber struct {
	client *client.Client
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

// Close drops the prober's idle connections; the service is stopped by the
// run.
func (p *apiProber) Close() error {
	p.client.HTTP.CloseIdleConnections()
	return nil
}
