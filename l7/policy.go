package l7

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Policy is a validated Config in the form both enforcers use: the proxy
// calls Decide; the data plane's maps are written from the same fields.
type Policy struct {
	cfg    Config
	routes []route
	rules  []rule
	// backend holds every backend given an id, ids index it: a policy
	// compiled from another (compileFrom) keeps that one's ids and never
	// reuses the id of a backend it dropped, so the data plane's pools
	// (keyed by id) stay right across a change.
	backend []netip.AddrPort
}

type route struct {
	Route
	ids  []int          // backend ids of the pool
	ring [RingSlots]int // slot -> backend id
}

type rule struct {
	Rule
	deny    bool
	methods uint32 // 0: any
	source  netip.Prefix
}

// Compile validates c and builds its Policy.
func Compile(c Config) (*Policy, error) { return compileFrom(c, nil) }

// compileFrom is Compile keeping prev's backend ids (prev may be nil): a
// backend of both has the same id in both, a new one gets an id never used
// by prev.
func compileFrom(c Config, prev *Policy) (*Policy, error) {
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
		rt := route{Route: r}
		for _, b := range r.Backends {
			ap := netip.MustParseAddrPort(b)
			id, ok := ids[ap]
			if !ok {
				id = len(p.backend)
				ids[ap] = id
				p.backend = append(p.backend, ap)
			}
			rt.ids = append(rt.ids, id)
		}
		rt.ring = buildRing(r.Backends, rt.ids)
		p.routes = append(p.routes, rt)
	}
	for _, r := range c.RBAC {
		ru := rule{Rule: r, deny: r.Action == "deny"}
		for _, m := range r.Methods {
			ru.methods |= methodBits[m]
		}
		if r.Source != "" {
			ru.source = netip.MustParsePrefix(r.Source).Masked()
		}
		p.rules = append(p.rules, ru)
	}
	return p, nil
}

// Config returns the configuration p was compiled from.
func (p *Policy) Config() Config { return p.cfg }

// Backend returns the address of backend id.
func (p *Policy) Backend(id int) netip.AddrPort { return p.backend[id] }

// uses reports whether a route of p sends requests to backend id.
func (p *Policy) uses(id int) bool {
	for _, rt := range p.routes {
		for _, b := range rt.ids {
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
			if ru.deny {
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
	return Verdict{Rule: -1, Route: best, Backend: p.routes[best].ring[fnv32(v)%RingSlots]}
}

func (ru rule) matches(r Request) bool {
	if ru.methods != 0 && ru.methods&methodBits[r.Method] == 0 {
		return false
	}
	if ru.PathPrefix != "" && !strings.HasPrefix(r.Path, ru.PathPrefix) {
		return false
	}
	if ru.source.IsValid() && !ru.source.Contains(r.Source.Unmap()) {
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
