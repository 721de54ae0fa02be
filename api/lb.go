package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/xdpshield/xdpshield/lb"
	"github.com/xdpshield/xdpshield/lb/health"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// Log attribute keys of the balancer's changes.
const (
	keyService  = "service"
	keyBackends = "backends"
)

// LBService is a balanced service in GET /v1/lb and change answers.
type LBService struct {
	Service  string      `json:"service"` // PROTO/VIP:PORT, the key the changes take
	Mode     string      `json:"mode"`
	Backends []LBBackend `json:"backends"`
	// SourceRanges are the client prefixes admitted; none: every client.
	SourceRanges []string `json:"source_ranges,omitempty"`
	// AffinityTimeout is session affinity's idle timeout ("3h0m0s"); empty:
	// off.
	AffinityTimeout string `json:"affinity_timeout,omitempty"`
	// Calls are connect()/sendmsg() calls to the service, by outcome.
	Translated uint64 `json:"translated"`
	NoBackend  uint64 `json:"no_backend"`
	Denied     uint64 `json:"denied"` // from outside SourceRanges: refused
}

// LBBackend is one backend and its state (active or draining).
type LBBackend struct {
	Addr   string `json:"addr"`
	State  string `json:"state"` // active, draining, quarantined
	Weight uint16 `json:"weight"`
	// Probes of a service with a health check, by result.
	ProbesOK     uint64 `json:"probes_ok,omitempty"`
	ProbesFailed uint64 `json:"probes_failed,omitempty"`
}

// LBResponse is GET /v1/lb.
type LBResponse struct {
	Services   []LBService `json:"services"`
	NotService uint64      `json:"not_service"` // calls in the cgroup to no service
	// StateMode is where per-socket state lives: "sk_storage" (on the
	// socket, no capacity) or "lru" (the fallback, ReverseCapacity sockets).
	StateMode string `json:"state_mode"`
	// ReverseEntries is how many sockets hold state (from counters).
	ReverseEntries  int    `json:"reverse_entries"`
	ReverseCapacity uint32 `json:"reverse_capacity"` // 0 with sk_storage
	// StateEvicted counts translations overwritten because a socket used
	// more services than its state holds; StateMissed, translations whose
	// state could not be stored (their VIP is not reported back).
	StateEvicted uint64 `json:"state_evicted"`
	StateMissed  uint64 `json:"state_missed"`
	// DestroyMode is what removing a backend does to its balanced
	// sockets: "sock_destroy" (terminated) or "left_open" (the fallback,
	// DestroyFallback says why); the sockets found, by outcome.
	DestroyMode      string `json:"destroy_mode"`
	DestroyFallback  string `json:"destroy_fallback,omitempty"`
	SocketsDestroyed uint64 `json:"sockets_destroyed"`
	SocketsLeftOpen  uint64 `json:"sockets_left_open"`
}

// LBChangeRequest is the body of POST /v1/lb/backends (add), POST
// /v1/lb/drain and DELETE /v1/lb/backends (remove).
type LBChangeRequest struct {
	Service  string   `json:"service"`  // PROTO/VIP:PORT
	Backends []string `json:"backends"` // ADDR:PORT
}

// LBServiceSpec is a whole service: the body of POST /v1/lb/services
// (create) and PUT /v1/lb/services (replace).
type LBServiceSpec struct {
	Service         string   `json:"service"`                    // PROTO/VIP:PORT
	Mode            string   `json:"mode"`                       // random (default) or maglev
	Backends        []string `json:"backends"`                   // ADDR:PORT or ADDR:PORT@WEIGHT
	Draining        []string `json:"draining,omitempty"`         // ADDR:PORT of Backends that drain (replace)
	SourceRanges    []string `json:"source_ranges,omitempty"`    // client prefixes; none: every client
	AffinityTimeout string   `json:"affinity_timeout,omitempty"` // "10m"; empty: off
	// Health, when set, probes the backends (fields as [lb.service.health]).
	Health *lbconf.HealthConfig `json:"health,omitempty"`
}

// LBServiceRef names a service: DELETE /v1/lb/services, and with Mode
// POST /v1/lb/mode.
type LBServiceRef struct {
	Service string `json:"service"`
	Mode    string `json:"mode,omitempty"`
}

// lbSpec turns a spec into a service: every parse problem, joined.
func lbSpec(sp LBServiceSpec) (lbconf.Service, error) {
	var errs []error
	k, err := lbconf.ParseServiceKey(sp.Service)
	if err != nil {
		errs = append(errs, err)
	}
	mode := lbconf.Mode(sp.Mode)
	if mode == "" {
		mode = lbconf.Random
	}
	bs, err := lbconf.ParseWeighted(sp.Backends)
	if err != nil {
		errs = append(errs, err)
	}
	drain, err := lbconf.ParseBackends(sp.Draining)
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range drain {
		i := slices.IndexFunc(bs, func(b lbconf.Backend) bool { return b.Addr == d })
		if i < 0 {
			errs = append(errs, fmt.Errorf("draining %s: not one of the backends", d))
			continue
		}
		bs[i].Draining = true
	}
	ranges, err := lbconf.ParsePrefixes(sp.SourceRanges)
	if err != nil {
		errs = append(errs, err)
	}
	var aff time.Duration
	if sp.AffinityTimeout != "" {
		if aff, err = time.ParseDuration(sp.AffinityTimeout); err != nil {
			errs = append(errs, fmt.Errorf("affinity_timeout: %w", err))
		}
	}
	health, err := sp.Health.Check()
	if err != nil {
		errs = append(errs, err)
	}
	return lbconf.Service{ServiceKey: k, Mode: mode, Backends: bs, SourceRanges: ranges, Affinity: aff, Health: health}, errors.Join(errs...)
}

// registerLB serves the balancer's endpoints and metrics.
func (s *Server) registerLB(l *lb.LB, allowed map[string]string) {
	s.mux.HandleFunc("GET /v1/lb", s.read(func(w http.ResponseWriter, r *http.Request) { s.getLB(w, l) }))
	s.mux.HandleFunc("POST /v1/lb/backends", s.change(func(w http.ResponseWriter, r *http.Request) {
		s.changeLB(w, r, l, "add", l.AddBackends)
	}))
	s.mux.HandleFunc("DELETE /v1/lb/backends", s.change(func(w http.ResponseWriter, r *http.Request) {
		s.changeLB(w, r, l, "remove", l.RemoveBackends)
	}))
	s.mux.HandleFunc("POST /v1/lb/drain", s.change(func(w http.ResponseWriter, r *http.Request) {
		s.changeLB(w, r, l, "drain", l.DrainBackends)
	}))
	s.mux.HandleFunc("POST /v1/lb/services", s.change(func(w http.ResponseWriter, r *http.Request) {
		s.serviceLB(w, r, l, "create", l.AddService)
	}))
	s.mux.HandleFunc("PUT /v1/lb/services", s.change(func(w http.ResponseWriter, r *http.Request) {
		s.serviceLB(w, r, l, "replace", l.ReplaceService)
	}))
	s.mux.HandleFunc("DELETE /v1/lb/services", s.change(func(w http.ResponseWriter, r *http.Request) {
		s.refLB(w, r, l, "delete")
	}))
	s.mux.HandleFunc("POST /v1/lb/mode", s.change(func(w http.ResponseWriter, r *http.Request) {
		s.refLB(w, r, l, "mode")
	}))
	allowed["/v1/lb/services"] = "POST, PUT, DELETE"
	allowed["/v1/lb/mode"] = "POST"
	allowed["/v1/lb"] = "GET"
	allowed["/v1/lb/backends"] = "POST, DELETE"
	allowed["/v1/lb/drain"] = "POST"
	s.reg.MustRegister(l.Collector())
}

func lbService(s lbconf.Service, c [lb.NumOutcomes]uint64, probes map[netip.AddrPort]health.ProbeCounts) LBService {
	out := LBService{Service: s.ServiceKey.String(), Mode: string(s.Mode), Backends: []LBBackend{},
		Translated: c[lb.Translated], NoBackend: c[lb.NoBackend], Denied: c[lb.Denied]}
	for _, b := range s.Backends {
		st := "active"
		switch {
		case b.Draining:
			st = "draining"
		case b.Quarantined:
			st = "quarantined"
		}
		pc := probes[b.Addr]
		out.Backends = append(out.Backends, LBBackend{Addr: b.Addr.String(), State: st, Weight: b.Weight,
			ProbesOK: pc.OK, ProbesFailed: pc.Failed})
	}
	for _, p := range s.SourceRanges {
		out.SourceRanges = append(out.SourceRanges, p.String())
	}
	if s.Affinity > 0 {
		out.AffinityTimeout = s.Affinity.String()
	}
	return out
}

func (s *Server) getLB(w http.ResponseWriter, l *lb.LB) {
	cnt, err := l.Counters()
	if err != nil {
		s.fail(w, err)
		return
	}
	st, err := l.StateCounters()
	if err != nil {
		s.fail(w, err)
		return
	}
	resp := LBResponse{Services: []LBService{}, NotService: cnt.NotService, StateMode: string(l.StateMode()),
		ReverseEntries: int(st.Live(l.StateMode(), l.ReverseSize())), ReverseCapacity: l.ReverseSize(),
		StateEvicted: st.Evicted, StateMissed: st.Missed}
	dm, why := l.DestroyMode()
	rs := l.RemovedSockets()
	resp.DestroyMode, resp.DestroyFallback, resp.SocketsDestroyed, resp.SocketsLeftOpen = string(dm), why, rs.Destroyed, rs.LeftOpen
	for _, sv := range l.Services() {
		resp.Services = append(resp.Services, lbService(sv, cnt.Services[sv.ServiceKey], l.Probes(sv.ServiceKey)))
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) changeLB(w http.ResponseWriter, r *http.Request, l *lb.LB, what string, op func(lbconf.ServiceKey, []netip.AddrPort) error) {
	var req LBChangeRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	k, err := lbconf.ParseServiceKey(req.Service)
	if err != nil {
		s.fail(w, badRequest{err})
		return
	}
	addrs, err := lbconf.ParseBackends(req.Backends)
	if err != nil {
		s.fail(w, badRequest{err})
		return
	}
	// A refusal of the balancer is the request's fault (unknown service,
	// duplicate, zero backends...): it changed nothing. A valid change the
	// kernel would not take (lb.ApplyError) is the service's: a 500, the
	// previous configuration written back.
	if err := op(k, addrs); err != nil {
		var ae *lb.ApplyError
		if errors.As(err, &ae) {
			s.log.Error("lb change failed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "lb "+what,
				keyService, k.String(), keyBackends, req.Backends, keyErr, err)
			s.fail(w, err)
			return
		}
		s.log.Warn("lb change refused", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "lb "+what,
			keyService, k.String(), keyBackends, req.Backends, keyErr, err)
		s.fail(w, badRequest{err})
		return
	}
	sv, _ := l.Service(k)
	s.log.Info("lb changed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "lb "+what,
		keyService, k.String(), keyBackends, req.Backends)
	cnt, _ := l.Counters()
	writeJSON(w, http.StatusOK, lbService(sv, cnt.Services[k], l.Probes(k)))
}

// serviceLB creates or replaces a whole service.
func (s *Server) serviceLB(w http.ResponseWriter, r *http.Request, l *lb.LB, what string, op func(lbconf.Service) error) {
	var sp LBServiceSpec
	if err := s.decode(w, r, &sp); err != nil {
		s.fail(w, err)
		return
	}
	sv, err := lbSpec(sp)
	if err != nil {
		s.fail(w, badRequest{err})
		return
	}
	s.applyLB(w, r, l, what, sv.ServiceKey, sp.Backends, func() error { return op(sv) }, http.StatusOK)
}

// refLB deletes a service or changes its mode.
func (s *Server) refLB(w http.ResponseWriter, r *http.Request, l *lb.LB, what string) {
	var ref LBServiceRef
	if err := s.decode(w, r, &ref); err != nil {
		s.fail(w, err)
		return
	}
	k, err := lbconf.ParseServiceKey(ref.Service)
	if err != nil {
		s.fail(w, badRequest{err})
		return
	}
	op := func() error { return l.RemoveService(k) }
	if what == "mode" {
		op = func() error { return l.SetMode(k, lbconf.Mode(ref.Mode)) }
	} else if ref.Mode != "" {
		s.fail(w, badRequest{errors.New("delete takes no mode")})
		return
	}
	s.applyLB(w, r, l, what, k, nil, op, http.StatusOK)
}

// applyLB runs one change of the balancer and answers: the service as it
// now is (an empty one after a delete), 400 when the balancer refused the
// change (nothing changed), 500 when the kernel refused a valid one (the
// previous configuration written back).
func (s *Server) applyLB(w http.ResponseWriter, r *http.Request, l *lb.LB, what string, k lbconf.ServiceKey, backends []string, op func() error, code int) {
	if err := op(); err != nil {
		var ae *lb.ApplyError
		if errors.As(err, &ae) {
			s.log.Error("lb change failed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "lb "+what,
				keyService, k.String(), keyBackends, backends, keyErr, err)
			s.fail(w, err)
			return
		}
		s.log.Warn("lb change refused", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "lb "+what,
			keyService, k.String(), keyBackends, backends, keyErr, err)
		s.fail(w, badRequest{err})
		return
	}
	s.log.Info("lb changed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "lb "+what,
		keyService, k.String(), keyBackends, backends)
	sv, ok := l.Service(k)
	if !ok {
		writeJSON(w, code, LBService{Service: k.String(), Backends: []LBBackend{}})
		return
	}
	cnt, _ := l.Counters()
	writeJSON(w, code, lbService(sv, cnt.Services[k], l.Probes(k)))
}
