package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// protoNumber is p's IP protocol number, as the programs' keys hold it.
func protoNumber(p lbconf.Proto) uint8 {
	if p == lbconf.UDP {
		return 17 // IPPROTO_UDP
	}
	return 6 // IPPROTO_TCP
}

// service is a Service as held by the balancer: ids included.
type service struct {
	id       uint32
	mode     lbconf.Mode
	backends []backend // in the order they were added
	ranges   []netip.Prefix
	affinity time.Duration
	health   *lbconf.HealthCheck
}

type backend struct {
	id          uint32
	addr        netip.AddrPort
	draining    bool
	quarantined bool
	weight      uint16 // >= 1
}

func (s *service) clone() *service {
	c := *s
	c.backends = slices.Clone(s.backends)
	c.ranges = slices.Clone(s.ranges)
	return &c
}

func (s *service) find(a netip.AddrPort) int {
	return slices.IndexFunc(s.backends, func(b backend) bool { return b.addr == a })
}

// active are the backends new sockets may choose: neither draining nor
// quarantined. When every backend that is not draining is quarantined,
// those are used all the same (Envoy's panic threshold: a health check
// that fails everywhere more likely measures itself than every backend).
func (s *service) active() []backend {
	var out, quarantined []backend
	for _, b := range s.backends {
		switch {
		case b.draining:
		case b.quarantined:
			quarantined = append(quarantined, b)
		default:
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return quarantined
	}
	return out
}

func (s *service) public(k lbconf.ServiceKey) lbconf.Service {
	out := lbconf.Service{ServiceKey: k, Mode: s.mode, SourceRanges: slices.Clone(s.ranges), Affinity: s.affinity, Health: s.health}
	for _, b := range s.backends {
		out.Backends = append(out.Backends, lbconf.Backend{Addr: b.addr, Draining: b.draining, Quarantined: b.quarantined, Weight: b.weight})
	}
	return out
}

// validateAll checks what no single service can (lbconf.ValidateSet).
func validateAll(svcs map[lbconf.ServiceKey]*service) error {
	backends := make(map[lbconf.ServiceKey][]netip.AddrPort, len(svcs))
	for k, s := range svcs {
		bs := make([]netip.AddrPort, len(s.backends))
		for i, b := range s.backends {
			bs[i] = b.addr
		}
		backends[k] = bs
	}
	return lbconf.ValidateSet(backends)
}

// Services returns every service, sorted by VIP, port and protocol.
func (l *LB) Services() []lbconf.Service {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []lbconf.Service
	for _, k := range lbconf.SortedKeys(l.services) {
		out = append(out, l.services[k].public(k))
	}
	return out
}

// Service returns one service.
func (l *LB) Service(k lbconf.ServiceKey) (lbconf.Service, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.services[k]
	if !ok {
		return lbconf.Service{}, false
	}
	return s.public(k), true
}

func addrsOf(bs []lbconf.Backend) []netip.AddrPort {
	out := make([]netip.AddrPort, len(bs))
	for i, b := range bs {
		out[i] = b.Addr
	}
	return out
}

// AddService adds a service with its backends (Draining ones included, as
// given). It is an error if the service exists.
func (l *LB) AddService(s lbconf.Service) error {
	return l.AddServices([]lbconf.Service{s})
}

// AddServices adds several services as one change: all or none.
func (l *LB) AddServices(ss []lbconf.Service) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := l.cloneServices()
	_, errs := l.addTo(next, ss)
	if err := errors.Join(append(errs, validateAll(next))...); err != nil {
		return err
	}
	return l.commit(next)
}

// addTo validates each of ss and puts it in next, a service already there
// being an error. A backend of a service this LB has now keeps its id (its
// place in a Maglev table) and whether it is draining; draining lists the
// backends that are ("service backend").
func (l *LB) addTo(next map[lbconf.ServiceKey]*service, ss []lbconf.Service) (draining []string, errs []error) {
	for _, s := range ss {
		if err := errors.Join(lbconf.ValidateService(s.ServiceKey, s.Mode, addrsOf(s.Backends)),
			lbconf.ValidateShape(s.ServiceKey, s.Backends, s.SourceRanges, s.Affinity)); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, ok := next[s.ServiceKey]; ok {
			errs = append(errs, fmt.Errorf("service %s: already exists", s.ServiceKey))
			continue
		}
		if err := lbconf.ValidateHealth(s.ServiceKey, s.Health); err != nil {
			errs = append(errs, err)
			continue
		}
		ns := &service{mode: s.Mode, ranges: slices.Clone(s.SourceRanges), affinity: s.Affinity, health: s.Health}
		old := l.services[s.ServiceKey]
		for _, b := range s.Backends {
			nb := backend{addr: b.Addr, draining: b.Draining, weight: lbconf.WeightOf(b.Weight)}
			if old != nil {
				if i := old.find(b.Addr); i >= 0 {
					nb.id = old.backends[i].id
					nb.draining = nb.draining || old.backends[i].draining
					nb.quarantined = old.backends[i].quarantined
				}
			}
			if nb.draining {
				draining = append(draining, s.ServiceKey.String()+" "+b.Addr.String())
			}
			ns.backends = append(ns.backends, nb)
		}
		next[s.ServiceKey] = ns
	}
	return draining, errs
}

// ReplaceService makes s the whole of an existing service (mode, backends
// and their weights, source ranges, affinity), validated once and written
// as one change: a backend kept keeps its id (its place in a Maglev
// table); whether it drains is what s says. The new table is swapped in
// whole before the service's entry (mode, ranges flag, affinity), so a
// connect() racing the change picks from the old table or the new one,
// always a backend of one of the two.
func (l *LB) ReplaceService(s lbconf.Service) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.services[s.ServiceKey]; !ok {
		return fmt.Errorf("unknown service %s", s.ServiceKey)
	}
	next := l.cloneServices()
	delete(next, s.ServiceKey)
	_, errs := l.addTo(next, []lbconf.Service{s})
	if err := errors.Join(append(errs, validateAll(next))...); err != nil {
		return err
	}
	// addTo keeps draining from the old service; here s says.
	ns := next[s.ServiceKey]
	for i := range ns.backends {
		j := slices.IndexFunc(s.Backends, func(b lbconf.Backend) bool { return b.Addr == ns.backends[i].addr })
		ns.backends[i].draining = s.Backends[j].Draining
	}
	return l.commit(next)
}

// RemoveService removes a service. Connected sockets keep their backend.
func (l *LB) RemoveService(k lbconf.ServiceKey) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.services[k]; !ok {
		return fmt.Errorf("unknown service %s", k)
	}
	next := l.cloneServices()
	delete(next, k)
	return l.commit(next)
}

// AddBackends adds backends to service k. A backend that is draining is
// made active again; one that is active is a duplicate, an error.
func (l *LB) AddBackends(k lbconf.ServiceKey, addrs []netip.AddrPort) error {
	return l.changeBackends(k, addrs, func(s *service, a netip.AddrPort) error {
		i := s.find(a)
		switch {
		case i < 0:
			s.backends = append(s.backends, backend{addr: a, weight: lbconf.DefaultWeight})
		case s.backends[i].draining:
			s.backends[i].draining = false
		default:
			return fmt.Errorf("service %s: duplicate backend %s", k, a)
		}
		return nil
	}, true)
}

// DrainBackends marks backends of service k as draining: connected sockets
// keep them, new sockets never pick them. Draining every backend leaves the
// service with none usable: connect() then fails (Refusal).
func (l *LB) DrainBackends(k lbconf.ServiceKey, addrs []netip.AddrPort) error {
	return l.changeBackends(k, addrs, func(s *service, a netip.AddrPort) error {
		i := s.find(a)
		if i < 0 {
			return fmt.Errorf("service %s: no backend %s", k, a)
		}
		s.backends[i].draining = true
		return nil
	}, false)
}

// RemoveBackends removes backends of service k. New sockets no longer pick
// them; connected ones keep talking to them (their destination is already
// the backend's address). Removing the last backend is refused: remove
// the service, or drain it.
func (l *LB) RemoveBackends(k lbconf.ServiceKey, addrs []netip.AddrPort) error {
	return l.changeBackends(k, addrs, func(s *service, a netip.AddrPort) error {
		i := s.find(a)
		if i < 0 {
			return fmt.Errorf("service %s: no backend %s", k, a)
		}
		s.backends = slices.Delete(s.backends, i, i+1)
		return nil
	}, false)
}

// SetMode changes how service k chooses backends.
func (l *LB) SetMode(k lbconf.ServiceKey, m lbconf.Mode) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.services[k]
	if !ok {
		return fmt.Errorf("unknown service %s", k)
	}
	if m != lbconf.Random && m != lbconf.Maglev {
		return fmt.Errorf("service %s: unknown mode %q (want random or maglev)", k, m)
	}
	next := l.cloneServices()
	ns := s.clone()
	ns.mode = m
	next[k] = ns
	return l.commit(next)
}

func (l *LB) changeBackends(k lbconf.ServiceKey, addrs []netip.AddrPort, op func(*service, netip.AddrPort) error, adding bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.services[k]
	if !ok {
		return fmt.Errorf("unknown service %s", k)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("service %s: no backends given", k)
	}
	ns := s.clone()
	var errs []error
	seen := map[netip.AddrPort]bool{}
	for _, a := range addrs {
		if seen[a] {
			errs = append(errs, fmt.Errorf("service %s: backend %s given twice", k, a))
			continue
		}
		seen[a] = true
		if err := op(ns, a); err != nil {
			errs = append(errs, err)
		}
	}
	if len(ns.backends) == 0 {
		errs = append(errs, fmt.Errorf("service %s: removing every backend would leave zero backends (remove the service, or drain them)", k))
	} else if adding {
		var all []netip.AddrPort
		for _, b := range ns.backends {
			all = append(all, b.addr)
		}
		if err := lbconf.ValidateService(k, ns.mode, all); err != nil {
			errs = append(errs, err)
		}
		if err := lbconf.ValidateShape(k, ns.public(k).Backends, ns.ranges, ns.affinity); err != nil {
			errs = append(errs, err)
		}
	}
	next := l.cloneServices()
	next[k] = ns
	if err := errors.Join(append(errs, validateAll(next))...); err != nil {
		return err
	}
	return l.commit(next)
}

func (l *LB) cloneServices() map[lbconf.ServiceKey]*service {
	next := make(map[lbconf.ServiceKey]*service, len(l.services)+1)
	for k, s := range l.services {
		next[k] = s.clone()
	}
	return next
}
