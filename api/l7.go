package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/xdpshield/xdpshield/l7"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// L7Route is one route of GET /v1/l7 and its counts.
type L7Route struct {
	Name       string   `json:"name"`
	Host       string   `json:"host,omitempty"`
	PathPrefix string   `json:"path_prefix"`
	Backends   []string `json:"backends"`
	// Fast are requests the kernel redirected to a backend, Slow those the
	// proxy forwarded; Codes the proxy's responses by class ("2xx"...).
	Fast  uint64            `json:"fast"`
	Slow  uint64            `json:"slow"`
	Codes map[string]uint64 `json:"codes"`
}

// L7Rule is one RBAC rule of GET /v1/l7 and the requests it denied.
type L7Rule struct {
	Name       string   `json:"name"`
	Action     string   `json:"action"`
	Methods    []string `json:"methods,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	Source     string   `json:"source,omitempty"`
	Header     string   `json:"header,omitempty"`
	Value      string   `json:"value,omitempty"`
	Denied     uint64   `json:"denied"`
}

// L7FastPath says whether the kernel's fast path serves, and if not why.
type L7FastPath struct {
	// Attached: the data plane is loaded on this kernel. KernelPolicy: it
	// holds the policy (otherwise it passes every request to the proxy).
	Attached     bool   `json:"attached"`
	KernelPolicy bool   `json:"kernel_policy"`
	Why          string `json:"why,omitempty"`
	// Messages are the kernel's counters by reason (absent without it).
	Messages map[string]uint64 `json:"messages,omitempty"`
	// Unjoined: connections the kernel could not take (its table full,
	// or no memory), which the proxy alone served.
	Unjoined uint64 `json:"unjoined"`
}

// L7Response is GET /v1/l7.
type L7Response struct {
	Listen     string     `json:"listen"`
	HashHeader string     `json:"hash_header,omitempty"`
	SetHeader  string     `json:"set_header,omitempty"` // "Name: value"
	FastPath   L7FastPath `json:"fast_path"`
	Routes     []L7Route  `json:"routes"`
	RBAC       []L7Rule   `json:"rbac"`
	NoRoute    uint64     `json:"no_route"`
	// PolicyGeneration is 1 as the service started, one more each change
	// (PUT /v1/l7/policy).
	PolicyGeneration uint64 `json:"policy_generation"`
}

// L7PolicyChange answers PUT /v1/l7/policy: the policy replaced, the one
// in force and its generation.
type L7PolicyChange struct {
	Old        policy.Config `json:"old"`
	New        policy.Config `json:"new"`
	Generation uint64        `json:"generation"`
}

// registerL7 serves the L7 proxy's state and metrics.
func (s *Server) registerL7(p *l7.Server, allowed map[string]string) {
	s.mux.HandleFunc("GET /v1/l7", s.read(func(w http.ResponseWriter, r *http.Request) {
		resp, err := l7Response(p)
		if err != nil {
			s.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}))
	s.mux.HandleFunc("GET /v1/l7/policy", s.read(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, p.Section().Config)
	}))
	s.mux.HandleFunc("PUT /v1/l7/policy", s.change(func(w http.ResponseWriter, r *http.Request) { s.putL7Policy(w, r, p) }))
	allowed["/v1/l7"] = "GET"
	allowed["/v1/l7/policy"] = "GET, PUT"
	s.reg.MustRegister(p.Collector())
}

// putL7Policy replaces the L7 policy, validated whole (l7.Server.Replace):
// a refused one changed nothing, in the proxy or in the kernel.
func (s *Server) putL7Policy(w http.ResponseWriter, r *http.Request, p *l7.Server) {
	var c policy.Config
	if err := s.decode(w, r, &c); err != nil {
		s.fail(w, err)
		return
	}
	old, gen, err := p.Replace(c)
	if err != nil {
		if errors.Is(err, l7.ErrInvalidPolicy) {
			s.log.Warn("l7 policy change refused", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "l7 policy", keyErr, err)
			s.fail(w, badf("%s", strings.ReplaceAll(err.Error(), "\n", "; ")))
			return
		}
		s.fail(w, err)
		return
	}
	s.log.Info("l7 policy changed", keyWho, who(r), keyRemote, r.RemoteAddr, keyWhat, "l7 policy",
		keyOld, policySummary(old), keyNew, policySummary(c), keyGeneration, gen)
	writeJSON(w, http.StatusOK, L7PolicyChange{Old: old, New: c, Generation: gen})
}

// policySummary is c in one short line for the change logs.
func policySummary(c policy.Config) string {
	var routes, rules []string
	for _, r := range c.Routes {
		routes = append(routes, fmt.Sprintf("%s: %s%s -> %s", r.Name, r.Host, r.PathPrefix, strings.Join(r.Backends, ",")))
	}
	for i, r := range c.RBAC {
		rules = append(rules, policy.RuleName(r, i)+": "+r.Action)
	}
	s := fmt.Sprintf("routes [%s] rules [%s]", strings.Join(routes, "; "), strings.Join(rules, "; "))
	if c.HashHeader != "" {
		s += " hash_header " + c.HashHeader
	}
	if c.SetHeader.Name != "" {
		s += " set_header " + c.SetHeader.Name
	}
	return s
}

// keyGeneration is the L7 policy's generation in change logs.
const keyGeneration = "generation"

func l7Response(p *l7.Server) (L7Response, error) {
	st, err := p.Status()
	if err != nil {
		return L7Response{}, err
	}
	cfg := st.Policy
	resp := L7Response{Listen: st.Listen, HashHeader: cfg.HashHeader, Routes: []L7Route{}, RBAC: []L7Rule{}, NoRoute: st.NoRoute,
		PolicyGeneration: st.Generation,
		FastPath:         L7FastPath{Attached: st.Fast, KernelPolicy: st.KernelPolicy, Messages: st.Reasons, Unjoined: st.Unjoined}}
	if cfg.SetHeader.Name != "" {
		resp.SetHeader = cfg.SetHeader.Name + ": " + cfg.SetHeader.Value
	}
	switch {
	case !st.Fast:
		resp.FastPath.Why = st.FastWhy
	case !st.KernelPolicy:
		resp.FastPath.Why = st.KernelPolicyWhy
	}
	for _, r := range st.Routes {
		out := L7Route{Name: r.Name, Host: r.Host, PathPrefix: r.PathPrefix, Backends: r.Backends,
			Fast: r.Fast, Slow: r.Slow, Codes: map[string]uint64{}}
		for k := 1; k < len(r.Class); k++ {
			out.Codes[fmt.Sprintf("%dxx", k)] = r.Class[k]
		}
		resp.Routes = append(resp.Routes, out)
	}
	for i, r := range st.Rules {
		resp.RBAC = append(resp.RBAC, L7Rule{Name: policy.RuleName(r.Rule, i), Action: r.Action, Methods: r.Methods,
			PathPrefix: r.PathPrefix, Source: r.Source, Header: r.Header, Value: r.Value, Denied: r.Denied})
	}
	return resp, nil
}
