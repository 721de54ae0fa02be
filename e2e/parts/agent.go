package parts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/topo"
)

// The agents run a storm's parts in another process (a container) and
// answer for them over HTTP on a unix socket, AgentSocket in a directory
// both sides see (a bind mount): the edge agent runs the edge server and the
// datagram service, the storm agent the generators and the legitimate
// client. RemoteEdge and RemoteStorm are their clients, an EdgeSide and a
// StormSide for Run.

// AgentSocket is the name of an agent's socket in its directory.
const AgentSocket = "agent.sock"

// ServeEdgeAgent serves the edge agent in the calling process's network
// namespace until ctx is done.
func ServeEdgeAgent(ctx context.Context, dir string, log *slog.Logger) error {
	ns, err := topo.Self()
	if err != nil {
		return err
	}
	defer ns.Close()
	var (
		mu   sync.Mutex
		edge *localEdge
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) {
		capacity, err := strconv.ParseFloat(r.URL.Query().Get("capacity"), 64)
		if err != nil {
			http.Error(w, "capacity: "+err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if edge != nil {
			http.Error(w, "already started", http.StatusConflict)
			return
		}
		e, err := Local{}.StartEdge(&storm.Topology{Edge: ns}, capacity)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		edge = e.(*localEdge)
		w.Write(edge.CA())
	})
	mux.HandleFunc("GET /served", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if edge == nil {
			http.Error(w, "not started", http.StatusConflict)
			return
		}
		fmt.Fprint(w, edge.udp.Served())
	})
	err = serveAgent(ctx, dir, mux, log)
	mu.Lock()
	defer mu.Unlock()
	if edge != nil {
		err = errors.Join(err, edge.Close())
	}
	return err
}

// stormRun is a storm request to the storm agent, and its answer.
type stormRun struct {
	Listed bool       `json:"listed"`
	Spec   storm.Spec `json:"spec"`
}

type stormDone struct {
	Per  []uint64 `json:"per"`
	Next []uint64 `json:"next"` // each template's sequence after the storm
}

type clientStart struct {
	CA      []byte       `json:"ca_pem"`
	Config  ClientConfig `json:"config"`
	Targets []netip.Addr `json:"targets"`
}

type peekAnswer struct {
	P50   [NumKinds]time.Duration `json:"p50"`
	P99   [NumKinds]time.Duration `json:"p99"`
	Reqs  int                     `json:"requests"`
	Fails int                     `json:"failures"`
}

// ServeStormAgent serves the storm agent in the calling process's network
// namespace until ctx is done. Its generators send out of StormDev, which
// the caller wires in before POST /start.
func ServeStormAgent(ctx context.Context, dir string, log *slog.Logger) error {
	ns, err := topo.Self()
	if err != nil {
		return err
	}
	defer ns.Close()
	var (
		mu      sync.Mutex
		s       *localStorm
		running = map[bool]context.CancelFunc{} // by listed: the storm in progress
	)
	get := func(w http.ResponseWriter) *localStorm {
		mu.Lock()
		defer mu.Unlock()
		if s == nil {
			http.Error(w, "not started", http.StatusConflict)
		}
		return s
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if s != nil {
			http.Error(w, "already started", http.StatusConflict)
			return
		}
		idx, err := ns.LinkIndex(storm.StormDev)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if s, err = newLocalStorm(ns, idx, r.URL.Query().Get("kind")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, s.Name())
	})
	mux.HandleFunc("POST /storm", func(w http.ResponseWriter, r *http.Request) {
		s := get(w)
		if s == nil {
			return
		}
		var req stormRun
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// A storm ends at its bound or at POST /stop, not when the
		// caller's request is cancelled: the caller wants what was sent.
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		mu.Lock()
		running[req.Listed] = cancel
		mu.Unlock()
		per, err := s.Storm(sctx, req.Listed, req.Spec, nil)
		mu.Lock()
		delete(running, req.Listed)
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		done := stormDone{Per: per}
		for _, t := range req.Spec.Templates {
			done.Next = append(done.Next, t.Next)
		}
		json.NewEncoder(w).Encode(done)
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if cancel, ok := running[r.URL.Query().Get("listed") == "1"]; ok {
			cancel()
		}
	})
	mux.HandleFunc("POST /client", func(w http.ResponseWriter, r *http.Request) {
		s := get(w)
		if s == nil {
			return
		}
		var req clientStart
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.StartClient(req.CA, req.Config, req.Targets...); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	})
	mux.HandleFunc("POST /switch", func(w http.ResponseWriter, r *http.Request) {
		s := get(w)
		if s == nil {
			return
		}
		smp, _ := s.Switch(r.URL.Query().Get("start") == "1")
		json.NewEncoder(w).Encode(smp)
	})
	mux.HandleFunc("GET /peek", func(w http.ResponseWriter, r *http.Request) {
		s := get(w)
		if s == nil {
			return
		}
		var a peekAnswer
		a.P50, a.P99, a.Reqs, a.Fails = s.Peek()
		json.NewEncoder(w).Encode(a)
	})
	err = serveAgent(ctx, dir, mux, log)
	mu.Lock()
	defer mu.Unlock()
	if s != nil {
		err = errors.Join(err, s.Close())
	}
	return err
}

// serveAgent serves h on dir/AgentSocket until ctx is done.
func serveAgent(ctx context.Context, dir string, h http.Handler, log *slog.Logger) error {
	// One P more than cores, as Run gives itself: a generator's long
	// syscalls must not hold the client's or the server's P.
	if n := runtime.NumCPU() + 1; runtime.GOMAXPROCS(0) < n {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	path := filepath.Join(dir, AgentSocket)
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	defer os.Remove(path)
	srv := &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	log.Info("agent serving", "socket", path)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// agentClient calls an agent on its socket.
type agentClient struct {
	hc *http.Client
}

func newAgentClient(dir string) *agentClient {
	path := filepath.Join(dir, AgentSocket)
	return &agentClient{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

// call does method path?q with body (JSON-encoded when not nil) and
// decodes the answer into out (a *[]byte takes it raw).
func (c *agentClient) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://agent" + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent %s %s: %s: %s", method, path, resp.Status, b)
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*o = b
		return nil
	default:
		return json.Unmarshal(b, out)
	}
}

// RemoteEdge starts the edge agent's servers (datagram capacity udpCapacity)
// and returns them as an EdgeSide.
func RemoteEdge(dir string, udpCapacity float64) (EdgeSide, error) {
	c := newAgentClient(dir)
	var ca []byte
	if err := c.call(context.Background(), "POST", "/start", url.Values{"capacity": {strconv.FormatFloat(udpCapacity, 'f', -1, 64)}}, nil, &ca); err != nil {
		return nil, err
	}
	return &remoteEdge{c: c, ca: ca}, nil
}

type remoteEdge struct {
	c  *agentClient
	ca []byte
}

func (e *remoteEdge) CA() []byte { return e.ca }

func (e *remoteEdge) Served() (uint64, error) {
	var b []byte
	if err := e.c.call(context.Background(), "GET", "/served", nil, nil, &b); err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(b), 10, 64)
}

// Close leaves the servers to the agent's end (its container's stop).
func (e *remoteEdge) Close() error { return nil }

// RemoteStorm readies the storm agent's generators (kind: see Deployment)
// and returns them and its client as a StormSide.
func RemoteStorm(dir, kind string) (StormSide, error) {
	c := newAgentClient(dir)
	var name []byte
	if err := c.call(context.Background(), "POST", "/start", url.Values{"kind": {kind}}, nil, &name); err != nil {
		return nil, err
	}
	return &remoteStorm{c: c, name: string(name)}, nil
}

type remoteStorm struct {
	c    *agentClient
	name string
}

func (s *remoteStorm) Name() string { return s.name }

func (s *remoteStorm) Storm(ctx context.Context, listed bool, spec storm.Spec, sent *atomic.Uint64) ([]uint64, error) {
	// When ctx ends first, the agent is asked to stop, and answers with
	// what it sent, as Storm does.
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-stopped:
		case <-ctx.Done():
			q := url.Values{"listed": {"0"}}
			if listed {
				q.Set("listed", "1")
			}
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s.c.call(sctx, "POST", "/stop", q, nil, nil)
		}
	}()
	rctx, cancel := context.WithTimeout(context.Background(), spec.Duration+time.Minute)
	defer cancel()
	var done stormDone
	if err := s.c.call(rctx, "POST", "/storm", nil, stormRun{Listed: listed, Spec: spec}, &done); err != nil {
		return nil, err
	}
	if len(done.Per) != len(spec.Templates) || len(done.Next) != len(spec.Templates) {
		return nil, fmt.Errorf("storm agent: %d counts and %d sequences for %d templates", len(done.Per), len(done.Next), len(spec.Templates))
	}
	var all uint64
	for i := range spec.Templates {
		spec.Templates[i].Next = done.Next[i]
		all += done.Per[i]
	}
	if sent != nil {
		sent.Add(all)
	}
	return done.Per, nil
}

func (s *remoteStorm) StartClient(caPEM []byte, cfg ClientConfig, targets ...netip.Addr) error {
	return s.c.call(context.Background(), "POST", "/client", nil, clientStart{CA: caPEM, Config: cfg, Targets: targets}, nil)
}

func (s *remoteStorm) Switch(start bool) (*Samples, error) {
	q := url.Values{"start": {"0"}}
	if start {
		q.Set("start", "1")
	}
	var smp *Samples
	if err := s.c.call(context.Background(), "POST", "/switch", q, nil, &smp); err != nil {
		return nil, err
	}
	return smp, nil
}

func (s *remoteStorm) Peek() (p50, p99 [NumKinds]time.Duration, reqs, fails int) {
	var a peekAnswer
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.c.call(ctx, "GET", "/peek", nil, nil, &a); err != nil {
		return p50, p99, 0, 0
	}
	return a.P50, a.P99, a.Reqs, a.Fails
}

// Close leaves the generators and client to the agent's end (its
// container's stop).
func (s *remoteStorm) Close() error { return nil }
