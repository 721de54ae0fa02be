package policy

import (
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
)

// Policy is a validated Config in the form both enforcers use: the proxy
// calls Decide; the data plane's maps are written from the same fields.
type Policy struct {
	cfg    Config
	routes []CompiledRoute
	rules  []CompiledRule
	// backend holds every backend given an id, ids index it: a policy
	// compiled from another (CompileFrom) keeps that one's ids and never
	// reuses the id of a backend it dropped, so the data plane's pools
	// (keyed by id) stay right across a change.
	backend []netip.AddrPort
}

// CompiledRoute is a route of a Policy: the Route as configured, its
// pool's backend ids and its consistent-hash ring.
type CompiledRoute struct {
	Route
	IDs  []int          // backend ids of the pool
	Ring [RingSlots]int // slot -> backend id
}

// CompiledRule is an RBAC rule of a Policy: the Rule as configured and
// what the enforcers compare.
type CompiledRule struct {
	Rule
	Deny    bool
	Methods uint32       // a bit per method named (GET 1, HEAD 2, POST 4, ...); 0: any
	Source  netip.Prefix // masked; invalid: any source
}

// Compile validates c and builds its Policy.
func Compile(c Config) (*Policy, error) { return CompileFrom(c, nil) }

// CompileFrom is Compile keeping prev's backend ids (prev may be nil): a
// backend of both has the same id in both, a new one gets an id never used
// by prev.
func CompileFrom(c Config, prev *Policy) (*Policy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := &Policy{cfg: c}
	ids := map[netip.AddrPort]int{}
	if prev != nil {
		p.backend = append(p.backend, prev.backend...)
		for id, ap := range prev.backend {
			ids[ap] = id
		}
	}
	for _, r := range c.Routes {
		rt := CompiledRoute{Route: r}
		for _, b := range r.Backends {
			ap := netip.MustParseAddrPort(b)
			id, ok := ids[ap]
			if !ok {
				id = len(p.backend)
				ids[ap] = id
				p.backend = append(p.backend, ap)
			}
			rt.IDs = append(rt.IDs, id)
		}
		rt.Ring = buildRing(r.Backends, rt.IDs)
		p.routes = append(p.routes, rt)
	}
	for _, r := range c.RBAC {
		ru := CompiledRule{Rule: r, Deny: r.Action == "deny"}
		for _, m := range r.Methods {
			ru.Methods |= methodBits[m]
		}
		if r.Source != "" {
			ru.Source = netip.MustParsePrefix(r.Source).Masked()
		}
		p.rules = append(p.rules, ru)
	}
	return p, nil
}

// Config returns the configuration p was compiled from.
func (p *Policy) Config() Config { return p.cfg }

// Backend returns the address of backend id.
func (p *Policy) Backend(id int) netip.AddrPort { return p.backend[id] }

// Routes are p's routes in configuration order (read only).
func (p *Policy) Routes() []CompiledRoute { return p.routes }

// Rules are p's RBAC rules in configuration order (read only).
func (p *Policy) Rules() []CompiledRule { return p.rules }

// Uses reports whether a route of p sends requests to backend id.
func (p *Policy) Uses(id int) bool {
	for _, rt := range p.routes {
		for _, b := range rt.IDs {
			if b == id {
				return true
			}
		}
	}
	return false
}

// Request is what a decision reads of a request: method as sent, path as
// sent up to '?', Host lowercased, the source address, and a header getter.
type Request struct {
	Method string
	Path   string
	Host   string
	Source netip.Addr
	Header func(name string) string
}

// RequestOf is what Decide reads of r: the path before '?' in its one
// meaning (NormalPath), or an error when it has more than one.
func RequestOf(r *http.Request) (Request, error) {
	raw, _, _ := strings.Cut(r.RequestURI, "?")
	path, err := NormalPath(raw)
	src, _ := netip.ParseAddrPort(r.RemoteAddr)
	return Request{Method: r.Method, Path: path, Host: strings.ToLower(r.Host),
		Source: src.Addr(), Header: r.Header.Get}, err
}

// Verdict is a decision: Deny (403), NoRoute (404), or Route and Backend.
type Verdict struct {
	Deny    bool
	Rule    int // the denying rule, -1 when none
	NoRoute bool
	Route   int
	Backend int // backend id
}

// Decide applies the RBAC rules (first match wins, default allow), then the
// routes, then the route's consistent-hash ring.
func (p *Policy) Decide(r Request) Verdict {
	for i, ru := range p.rules {
		if ru.matches(r) {
			if ru.Deny {
				return Verdict{Deny: true, Rule: i}
			}
			break
		}
	}
	best, bestScore := -1, -1
	for i, rt := range p.routes {
		if rt.Host != "" && rt.Host != r.Host {
			continue
		}
		if !strings.HasPrefix(r.Path, rt.PathPrefix) {
			continue
		}
		score := len(rt.PathPrefix)
		if rt.Host != "" {
			score += 1 << 16
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return Verdict{Rule: -1, NoRoute: true}
	}
	var v string
	if p.cfg.HashHeader != "" {
		v = r.Header(p.cfg.HashHeader)
	}
	return Verdict{Rule: -1, Route: best, Backend: p.routes[best].Ring[fnv32(v)%RingSlots]}
}

// SourceMask is bit i set for each rule i of p whose source holds src.
func (p *Policy) SourceMask(src netip.Addr) uint32 {
	var mask uint32
	for i, ru := range p.rules {
		if ru.Source.IsValid() && ru.Source.Contains(src.Unmap()) {
			mask |= 1 << i
		}
	}
	return mask
}

func (ru CompiledRule) matches(r Request) bool {
	if ru.Methods != 0 && ru.Methods&methodBits[r.Method] == 0 {
		return false
	}
	if ru.PathPrefix != "" && !strings.HasPrefix(r.Path, ru.PathPrefix) {
		return false
	}
	if ru.Source.IsValid() && !ru.Source.Contains(r.Source.Unmap()) {
		return false
	}
	if ru.Header != "" && r.Header(ru.Header) != ru.Value {
		return false
	}
	return true
}

// fnv32 is FNV-1a, 32 bits: the data plane computes the same.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// pointsPerBackend is how many points each backend has on the ring.
const pointsPerBackend = 64

// buildRing is Ketama-style: each backend (named by its address, so a pool
// that loses one keeps the others' points) places points on a 32-bit ring;
// slot s belongs to the first point at or after s*2^32/RingSlots. Removing
// one of N backends moves only the slots it owned, about 1/N.
func buildRing(names []string, ids []int) [RingSlots]int {
	type point struct {
		at uint32
		id int
	}
	var pts []point
	for i, n := range names {
		for k := 0; k < pointsPerBackend; k++ {
			pts = append(pts, point{fnv32(fmt.Sprintf("%s#%d", n, k)) * 2654435761, ids[i]})
		}
	}
	sort.Slice(pts, func(a, b int) bool {
		if pts[a].at != pts[b].at {
			return pts[a].at < pts[b].at
		}
		return pts[a].id < pts[b].id
	})
	var ring [RingSlots]int
	j := 0
	for s := 0; s < RingSlots; s++ {
		at := uint32(uint64(s) << 32 / RingSlots)
		for j < len(pts) && pts[j].at < at {
			j++
		}
		ring[s] = pts[j%len(pts)].id
	}
	return ring
}
