package parts

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/service"
	"github.com/xdpshield/xdpshield/shield"
)

// Deployment runs a storm's parts: the two namespaces, the shield service
// on edge0, the edge's servers, the generators and the legitimate client.
// e2e.Run drives any deployment through the same phases and assertions. Local
// (the default) runs every part in this process, in namespaces it creates;
// the container lane (e2e/container) runs each part in a container.
type Deployment interface {
	// Namespaces returns the edge and storm namespaces, with nothing in
	// them but loopback: e2e.Run wires them (storm.NewTopologyIn).
	storm.Namespaces
	// StartShield starts the shield service for storm.EdgeDev in top.Edge.
	StartShield(top *storm.Topology, cfg service.Config) (ShieldSide, error)
	// StartEdge starts the HTTPS edge server and the datagram service in
	// top.Edge.
	StartEdge(top *storm.Topology, udpCapacity float64) (EdgeSide, error)
	// StartStorm readies the generators (kind: "auto", "xdp",
	// "af_packet") and the legitimate client's recorder in top.Storm.
	StartStorm(top *storm.Topology, kind string) (StormSide, error)
}

// ShieldSide is a running shield service.
type ShieldSide interface {
	// Shield reads (and may change) the service's maps.
	Shield() *shield.Shield
	// APIAddr is the service's API, reachable from inside the edge
	// namespace.
	APIAddr() string
	// Detach removes the service's program from edge0 (the contrast run).
	Detach() error
	// Close stops the service and removes its pins.
	Close() error
}

// EdgeSide is the edge's servers.
type EdgeSide interface {
	CA() []byte // PEM: the certificate a client must trust
	Served() (uint64, error)
	Close() error
}

// StormSide is the generators and the legitimate client.
type StormSide interface {
	// Name names the storm generator.
	Name() string
	// Storm runs spec on the storm generator, or, when listed is set, on
	// the AF_PACKET generator of the allow- and deny-listed sources (see
	// storm.Run).
	Storm(ctx context.Context, listed bool, spec storm.Spec, sent *atomic.Uint64) ([]uint64, error)
	// StartClient starts the legitimate client against targets.
	StartClient(caPEM []byte, cfg ClientConfig, targets ...netip.Addr) error
	// Switch starts a phase's samples (start) or ends it, returning the
	// samples just finished.
	Switch(start bool) (*Samples, error)
	// Peek is the phase in progress so far: p99 per kind, requests,
	// failures.
	Peek() (p50, p99 [NumKinds]time.Duration, reqs, fails int)
	Close() error
}

// Restarter is a deployment that can restart the shield service while a
// storm runs: e2e.Run then restarts it once, a third into the first storm phase
// with the shield attached, and asserts the edge stayed protected.
type Restarter interface {
	// RestartShield stops the service and starts it again, and returns
	// what it saw.
	RestartShield(ctx context.Context) (RestartStats, error)
}

// RestartStats are a shield restart's figures.
type RestartStats struct {
	DownMs      float64 `json:"down_ms"`        // from the stop to the new service's API answering
	LinkBefore  uint32  `json:"link_id_before"` // the pinned link's ID before the stop
	LinkAfter   uint32  `json:"link_id_after"`  // and after the new service started
	DropsDown   uint64  `json:"drops_while_down"`
	Adopted     bool    `json:"adopted"` // the new service said it adopted the pinned link
	AdoptedNote string  `json:"adopted_log,omitempty"`
}

// Local runs every part in this process, in namespaces it creates (the
// `shieldlab storm` and TestScenario deployment).
type Local struct {
	storm.LocalNamespaces
}

func (Local) StartEdge(top *storm.Topology, udpCapacity float64) (EdgeSide, error) {
	srv, err := StartEdgeServer(top.Edge, storm.Edge4, storm.Edge6, storm.Front4, storm.Front6)
	if err != nil {
		return nil, fmt.Errorf("edge server: %w", err)
	}
	udp, err := StartDatagramService(top.Edge, udpCapacity)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("datagram service: %w", err)
	}
	return &localEdge{srv, udp}, nil
}

type localEdge struct {
	srv *EdgeServer
	udp *DatagramService
}

func (e *localEdge) CA() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.srv.srv.TLSConfig.Certificates[0].Certificate[0]})
}
func (e *localEdge) Served() (uint64, error) { return e.udp.Served(), nil }
func (e *localEdge) Close() error            { return errors.Join(e.srv.Close(), e.udp.Close()) }

func (Local) StartStorm(top *storm.Topology, kind string) (StormSide, error) {
	return newLocalStorm(top.Storm, top.StormIfindex, kind)
}

// localStorm is the generators, client and recorder of one namespace: the
// Local deployment's, and the storm container's (served by its agent).
type localStorm struct {
	ns          *topo.NS
	gen, listed storm.Generator
	rec         Recorder
	client      *Client
}

func newLocalStorm(ns *topo.NS, ifindex int, kind string) (*localStorm, error) {
	s := &localStorm{ns: ns}
	var err error
	if s.gen, err = storm.NewGenerator(kind, ns, ifindex); err != nil {
		return nil, fmt.Errorf("generator: %w", err)
	}
	if s.listed, err = storm.NewPacketGenerator(ns, ifindex); err != nil {
		s.gen.Close()
		return nil, fmt.Errorf("listed sources' generator: %w", err)
	}
	return s, nil
}

func (s *localStorm) Name() string { return s.gen.Name() }

func (s *localStorm) Storm(ctx context.Context, listed bool, spec storm.Spec, sent *atomic.Uint64) ([]uint64, error) {
	g := s.gen
	if listed {
		g = s.listed
	}
	return storm.Run(ctx, g, spec, sent)
}

func (s *localStorm) StartClient(caPEM []byte, cfg ClientConfig, targets ...netip.Addr) error {
	if s.client != nil {
		return errors.New("client already started")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no certificate in the edge's CA")
	}
	s.client = StartClient(s.ns, pool, cfg, &s.rec, targets...)
	return nil
}

func (s *localStorm) Switch(start bool) (*Samples, error) { return s.rec.Switch(start), nil }

func (s *localStorm) Peek() (p50, p99 [NumKinds]time.Duration, reqs, fails int) {
	return s.rec.peek()
}

func (s *localStorm) Close() error {
	if s.client != nil {
		s.client.Stop()
	}
	return errors.Join(s.gen.Close(), s.listed.Close())
}
