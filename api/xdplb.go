package api

import (
	"errors"
	"net/http"

	"github.com/xdpshield/xdpshield/xdplb"
)

// XDPLBResponse is GET /v1/xdplb and the answer of PUT /v1/xdplb: the XDP
// balancer's configuration and its counters.
type XDPLBResponse struct {
	Config xdplb.Config `json:"config"`
	Stats  xdplb.Stats  `json:"stats"`
}

// registerXDPLB serves the XDP balancer's endpoints and metrics.
func (s *Server) registerXDPLB(b *xdplb.Balancer, allowed map[string]string) {
	s.mux.HandleFunc("GET /v1/xdplb", s.read(func(w http.ResponseWriter, r *http.Request) { s.getXDPLB(w, b) }))
	s.mux.HandleFunc("PUT /v1/xdplb", s.change(func(w http.ResponseWriter, r *http.Request) { s.putXDPLB(w, r, b) }))
	allowed["/v1/xdplb"] = "GET, PUT"
	s.reg.MustRegister(b.Collector())
}

func (s *Server) getXDPLB(w http.ResponseWriter, b *xdplb.Balancer) {
	st, err := b.Stats()
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, XDPLBResponse{Config: b.Config(), Stats: st})
}

// putXDPLB replaces the whole configuration: validated first (a refusal
// is a 400 and changes nothing), then each VIP's new table swapped in.
func (s *Server) putXDPLB(w http.ResponseWriter, r *http.Request, b *xdplb.Balancer) {
	var cfg xdplb.Config
	if err := s.decode(w, r, &cfg); err != nil {
		s.fail(w, err)
		return
	}
	if err := b.Apply(cfg); err != nil {
		if errors.Is(err, xdplb.ErrInvalid) {
			s.log.Warn("xdplb change refused", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "xdplb put", keyErr, err)
			s.fail(w, badRequest{err})
			return
		}
		s.log.Error("xdplb change failed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "xdplb put", keyErr, err)
		s.fail(w, err)
		return
	}
	s.log.Info("xdplb changed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "xdplb put", "vips", len(cfg.VIPs))
	s.getXDPLB(w, b)
}
