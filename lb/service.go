package lb

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Proto is a service's transport protocol.
type Proto string

const (
	TCP Proto = "tcp"
	UDP Proto = "udp"
)

func (p Proto) number() uint8 {
	if p == UDP {
		return 17 // IPPROTO_UDP
	}
	return 6 // IPPROTO_TCP
}

// Mode is how a service chooses a backend for a new socket.
type Mode string

const (
	// Random picks uniformly per connect() (and per datagram).
	Random Mode = "random"
	// Maglev picks through a consistent table: a socket bound to the same
	// source gets the same backend, and removing one of N backends moves
	// only the choices that were that backend's (about 1/N).
	Maglev Mode = "maglev"
)

// ServiceKey names a service: its VIP, port and protocol.
type ServiceKey struct {
	VIP   netip.Addr
	Port  uint16
	Proto Proto
}

func (k ServiceKey) String() string {
	return string(k.Proto) + "/" + netip.AddrPortFrom(k.VIP, k.Port).String()
}

// ParseServiceKey parses "tcp/198.18.1.1:80" or "udp/[2001:db8::1]:53".
func ParseServiceKey(s string) (ServiceKey, error) {
	proto, ap, ok := strings.Cut(s, "/")
	if !ok {
		return ServiceKey{}, fmt.Errorf("service %q: want PROTO/VIP:PORT", s)
	}
	a, err := netip.ParseAddrPort(ap)
	if err != nil {
		return ServiceKey{}, fmt.Errorf("service %q: %w", s, err)
	}
	return ServiceKey{VIP: a.Addr(), Port: a.Port(), Proto: Proto(proto)}, nil
}

// Backend is one destination of a service.
type Backend struct {
	Addr netip.AddrPort
	// Draining backends keep their connected sockets and get no new ones.
	Draining bool
	// Quarantined backends failed their health checks (HealthCheck): out
	// of the choice table and of affinity until they pass again. Set by
	// the prober only.
	Quarantined bool
	// Weight is the backend's share of new sockets relative to the
	// service's other backends (its share of the choice table, in both
	// modes); 0 means DefaultWeight.
	Weight uint16
}

// DefaultWeight is a backend's weight when none is given.
const DefaultWeight = 1

// MinSlotsPerBackend is the fewest choice-table slots a backend's weight
// may give it: the Maglev paper's 100 slots per backend (section 3.4),
// the same bound as MaxServiceBackends.
const MinSlotsPerBackend = 100

// MaxServiceRanges is how many source ranges one service may have.
const MaxServiceRanges = 64

// Service is a VIP and its backends.
type Service struct {
	ServiceKey
	Mode     Mode
	Backends []Backend
	// SourceRanges, when not empty, are the client prefixes admitted: a
	// socket whose source address (as bound at connect/sendmsg; the
	// unspecified address when unbound) is in none is refused (Refusal),
	// counted as Denied. Of the VIP's family.
	SourceRanges []netip.Prefix
	// Affinity, when not zero, is session affinity by client: a client's
	// new socket within Affinity of its last one to this service gets the
	// same backend while that backend is active (Kubernetes' ClientIP
	// affinity, Cilium's affinity map). The client is the socket's bound
	// source address, else its network namespace. Whole milliseconds, at
	// most MaxAffinity.
	Affinity time.Duration
	// Health, when set, probes the backends (see HealthCheck).
	Health *HealthCheck
}

// MaxAffinity bounds a service's affinity timeout (Kubernetes' bound for
// sessionAffinityConfig.clientIP.timeoutSeconds).
const MaxAffinity = 24 * time.Hour

// service is a Service as held by the balancer: ids included.
type service struct {
	id       uint32
	mode     Mode
	backends []backend // in the order they were added
	ranges   []netip.Prefix
	affinity time.Duration
	health   *HealthCheck
}

type backend struct {
	id          uint32
	addr        netip.AddrPort
	draining    bool
	quarantined bool
	weight      uint16 // >= 1
}

func weightOf(w uint16) uint16 {
	if w == 0 {
		return DefaultWeight
	}
	return w
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

func (s *service) public(k ServiceKey) Service {
	out := Service{ServiceKey: k, Mode: s.mode, SourceRanges: slices.Clone(s.ranges), Affinity: s.affinity, Health: s.health}
	for _, b := range s.backends {
		out.Backends = append(out.Backends, Backend{Addr: b.addr, Draining: b.draining, Quarantined: b.quarantined, Weight: b.weight})
	}
	return out
}

// validateShape checks what validateService does not: weights (every
// backend keeps at least MinSlotsPerBackend slots of the table) and source
// ranges (of the VIP's family, no host bits, no duplicates).
func validateShape(k ServiceKey, bs []Backend, ranges []netip.Prefix, affinity time.Duration) error {
	var errs []error
	if affinity < 0 || affinity > MaxAffinity || affinity%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("service %s: affinity timeout %v: want 0 (off) or whole milliseconds up to %v", k, affinity, MaxAffinity))
	}
	var sum uint64
	for _, b := range bs {
		sum += uint64(weightOf(b.Weight))
	}
	for _, b := range bs {
		if len(bs) > MaxServiceBackends {
			break // validateService says so, once
		}
		if w := uint64(weightOf(b.Weight)); sum > 0 && w*TableSlots/sum < MinSlotsPerBackend {
			errs = append(errs, fmt.Errorf("service %s: backend %s: weight %d of %d in all gives it %d of %d slots, fewer than %d (raise it, or lower the others)",
				k, b.Addr, w, sum, w*TableSlots/sum, TableSlots, MinSlotsPerBackend))
		}
	}
	if len(ranges) > MaxServiceRanges {
		errs = append(errs, fmt.Errorf("service %s: %d source ranges, more than %d", k, len(ranges), MaxServiceRanges))
	}
	seen := map[netip.Prefix]bool{}
	for _, p := range ranges {
		switch {
		case !p.IsValid():
			errs = append(errs, fmt.Errorf("service %s: source range %s is not a prefix", k, p))
			continue
		case p.Addr().Zone() != "" || p.Addr().Is4In6():
			errs = append(errs, fmt.Errorf("service %s: source range %s: write IPv4 as IPv4, without a zone", k, p))
		case k.VIP.IsValid() && p.Addr().Is4() != k.VIP.Is4():
			errs = append(errs, fmt.Errorf("service %s: source range %s is not of the VIP's family", k, p))
		case p.Masked() != p:
			errs = append(errs, fmt.Errorf("service %s: source range %s has bits set past /%d (did you mean %s?)", k, p, p.Bits(), p.Masked()))
		}
		if seen[p] {
			errs = append(errs, fmt.Errorf("service %s: duplicate source range %s", k, p))
		}
		seen[p] = true
	}
	return errors.Join(errs...)
}

// validate checks one service on its own: every problem, joined.
func validateService(k ServiceKey, mode Mode, backends []netip.AddrPort) error {
	var errs []error
	switch {
	case !k.VIP.IsValid():
		errs = append(errs, fmt.Errorf("service %s: no VIP", k))
	case k.VIP.Zone() != "":
		errs = append(errs, fmt.Errorf("service %s: VIP with a zone", k))
	case k.VIP.Is4In6():
		errs = append(errs, fmt.Errorf("service %s: VIP %s is IPv4-mapped; write it as IPv4", k, k.VIP))
	case k.VIP.IsUnspecified() || k.VIP.IsMulticast():
		errs = append(errs, fmt.Errorf("service %s: VIP %s is not a unicast address", k, k.VIP))
	}
	if k.Port == 0 {
		errs = append(errs, fmt.Errorf("service %s: port 0 is not a port", k))
	}
	if k.Proto != TCP && k.Proto != UDP {
		errs = append(errs, fmt.Errorf("service %s: unknown protocol %q (want tcp or udp)", k, k.Proto))
	}
	if mode != Random && mode != Maglev {
		errs = append(errs, fmt.Errorf("service %s: unknown mode %q (want random or maglev)", k, mode))
	}
	if len(backends) == 0 {
		errs = append(errs, fmt.Errorf("service %s: zero backends", k))
	}
	if len(backends) > MaxServiceBackends {
		errs = append(errs, fmt.Errorf("service %s: %d backends, more than the %d a choice table of %d slots tells apart evenly (100 slots per backend)",
			k, len(backends), MaxServiceBackends, TableSlots))
	}
	seen := map[netip.AddrPort]bool{}
	for _, b := range backends {
		a := b.Addr()
		switch {
		case !a.IsValid():
			errs = append(errs, fmt.Errorf("service %s: backend with no address", k))
			continue
		case a.Zone() != "" || a.Is4In6() || a.IsUnspecified() || a.IsMulticast():
			errs = append(errs, fmt.Errorf("service %s: backend %s is not a plain unicast address", k, b))
		case k.VIP.IsValid() && a.Is4() != k.VIP.Is4():
			errs = append(errs, fmt.Errorf("service %s: backend %s is not of the VIP's family", k, b))
		}
		if b.Port() == 0 {
			errs = append(errs, fmt.Errorf("service %s: backend %s: port 0 is not a port", k, b))
		}
		if seen[b] {
			errs = append(errs, fmt.Errorf("service %s: duplicate backend %s", k, b))
		}
		seen[b] = true
	}
	return errors.Join(errs...)
}

// validateAll checks what no single service can: counts, and that no VIP is
// also a backend's address (a socket would be sent to an address the
// balancer claims for itself).
func validateAll(svcs map[ServiceKey]*service) error {
	var errs []error
	if len(svcs) > MaxServices {
		errs = append(errs, fmt.Errorf("%d services, more than the %d that fit", len(svcs), MaxServices))
	}
	n := 0
	backendOf := map[netip.Addr]ServiceKey{}
	for k, s := range svcs {
		n += len(s.backends)
		for _, b := range s.backends {
			if prev, ok := backendOf[b.addr.Addr()]; !ok || cmp.Compare(k.String(), prev.String()) < 0 {
				backendOf[b.addr.Addr()] = k
			}
		}
	}
	if n > MaxBackends {
		errs = append(errs, fmt.Errorf("%d backends, more than the %d that fit", n, MaxBackends))
	}
	for _, k := range sortedKeys(svcs) {
		if owner, ok := backendOf[k.VIP]; ok {
			errs = append(errs, fmt.Errorf("service %s: VIP %s is a backend address of service %s", k, k.VIP, owner))
		}
	}
	return errors.Join(errs...)
}

func sortedKeys(svcs map[ServiceKey]*service) []ServiceKey {
	keys := make([]ServiceKey, 0, len(svcs))
	for k := range svcs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ServiceKey) int {
		return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto))
	})
	return keys
}

// Services returns every service, sorted by VIP, port and protocol.
func (l *LB) Services() []Service {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Service
	for _, k := range sortedKeys(l.services) {
		out = append(out, l.services[k].public(k))
	}
	return out
}

// Service returns one service.
func (l *LB) Service(k ServiceKey) (Service, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.services[k]
	if !ok {
		return Service{}, false
	}
	return s.public(k), true
}

func addrsOf(bs []Backend) []netip.AddrPort {
	out := make([]netip.AddrPort, len(bs))
	for i, b := range bs {
		out[i] = b.Addr
	}
	return out
}

// AddService adds a service with its backends (Draining ones included, as
// given). It is an error if the service exists.
func (l *LB) AddService(s Service) error {
	return l.AddServices([]Service{s})
}

// AddServices adds several services as one change: all or none.
func (l *LB) AddServices(ss []Service) error {
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
func (l *LB) addTo(next map[ServiceKey]*service, ss []Service) (draining []string, errs []error) {
	for _, s := range ss {
		if err := errors.Join(validateService(s.ServiceKey, s.Mode, addrsOf(s.Backends)),
			validateShape(s.ServiceKey, s.Backends, s.SourceRanges, s.Affinity)); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, ok := next[s.ServiceKey]; ok {
			errs = append(errs, fmt.Errorf("service %s: already exists", s.ServiceKey))
			continue
		}
		if err := validateHealth(s.ServiceKey, s.Health); err != nil {
			errs = append(errs, err)
			continue
		}
		ns := &service{mode: s.Mode, ranges: slices.Clone(s.SourceRanges), affinity: s.Affinity, health: s.Health}
		old := l.services[s.ServiceKey]
		for _, b := range s.Backends {
			nb := backend{addr: b.Addr, draining: b.Draining, weight: weightOf(b.Weight)}
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
func (l *LB) ReplaceService(s Service) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.services[s.ServiceKey]; !ok {
		return fmt.Errorf("unknown service %s", s.ServiceKey)
	}
	next := l.cloneServices()
	delete(next, s.ServiceKey)
	_, errs := l.addTo(next, []Service{s})
	if err := errors.Join(append(errs, validateAll(next))...); err != nil {
		return err
	}
	// addTo keeps draining from the old service; here s says.
	ns := next[s.ServiceKey]
	for i := range ns.backends {
		j := slices.IndexFunc(s.Backends, func(b Backend) bool { return b.Addr == ns.backends[i].addr })
		ns.backends[i].draining = s.Backends[j].Draining
	}
	return l.commit(next)
}

// RemoveService removes a service. Connected sockets keep their backend.
func (l *LB) RemoveService(k ServiceKey) error {
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
func (l *LB) AddBackends(k ServiceKey, addrs []netip.AddrPort) error {
	return l.changeBackends(k, addrs, func(s *service, a netip.AddrPort) error {
		i := s.find(a)
		switch {
		case i < 0:
			s.backends = append(s.backends, backend{addr: a, weight: DefaultWeight})
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
func (l *LB) DrainBackends(k ServiceKey, addrs []netip.AddrPort) error {
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
func (l *LB) RemoveBackends(k ServiceKey, addrs []netip.AddrPort) error {
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
func (l *LB) SetMode(k ServiceKey, m Mode) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.services[k]
	if !ok {
		return fmt.Errorf("unknown service %s", k)
	}
	if m != Random && m != Maglev {
		return fmt.Errorf("service %s: unknown mode %q (want random or maglev)", k, m)
	}
	next := l.cloneServices()
	ns := s.clone()
	ns.mode = m
	next[k] = ns
	return l.commit(next)
}

func (l *LB) changeBackends(k ServiceKey, addrs []netip.AddrPort, op func(*service, netip.AddrPort) error, adding bool) error {
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
		if err := validateService(k, ns.mode, all); err != nil {
			errs = append(errs, err)
		}
		if err := validateShape(k, ns.public(k).Backends, ns.ranges, ns.affinity); err != nil {
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

func (l *LB) cloneServices() map[ServiceKey]*service {
	next := make(map[ServiceKey]*service, len(l.services)+1)
	for k, s := range l.services {
		next[k] = s.clone()
	}
	return next
}

// String formats a backend as ADDR:PORT, with "@W" for a weight other
// than DefaultWeight and " (draining)" when it is.
func (b Backend) String() string {
	s := b.Addr.String()
	if w := weightOf(b.Weight); w != DefaultWeight {
		s += "@" + strconv.Itoa(int(w))
	}
	if b.Draining {
		s += " (draining)"
	}
	return s
}

// ParseWeighted parses backends written ADDR:PORT or ADDR:PORT@WEIGHT
// (WEIGHT 1..65535).
func ParseWeighted(ss []string) ([]Backend, error) {
	var out []Backend
	var errs []error
	for _, s := range ss {
		a, w, weighted := strings.Cut(s, "@")
		b := Backend{Weight: DefaultWeight}
		addr, err := netip.ParseAddrPort(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", strconv.Quote(s), err))
			continue
		}
		b.Addr = addr
		if weighted {
			n, err := strconv.ParseUint(w, 10, 16)
			if err != nil || n == 0 {
				errs = append(errs, fmt.Errorf("backend %s: weight %q: want 1..65535", strconv.Quote(s), w))
				continue
			}
			b.Weight = uint16(n)
		}
		out = append(out, b)
	}
	return out, errors.Join(errs...)
}

// ParsePrefixes parses source ranges (CIDR prefixes).
func ParsePrefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("source range %s: %w", strconv.Quote(s), err))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// ParseBackends parses ADDR:PORT strings.
func ParseBackends(ss []string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	var errs []error
	for _, s := range ss {
		a, err := netip.ParseAddrPort(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", strconv.Quote(s), err))
			continue
		}
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}

// Describe is a service's settings in one line, for logs and comparisons:
// mode, backends (weights, draining), source ranges, affinity.
func (s Service) Describe() string {
	var b strings.Builder
	b.WriteString(string(s.Mode))
	b.WriteString(" [")
	for i, be := range s.Backends {
		if i > 0 {
			b.WriteString(", ")
		}
		be.Weight = weightOf(be.Weight)
		b.WriteString(be.String())
	}
	b.WriteString("]")
	if len(s.SourceRanges) > 0 {
		fmt.Fprintf(&b, " ranges %v", s.SourceRanges)
	}
	if s.Affinity > 0 {
		fmt.Fprintf(&b, " affinity %v", s.Affinity)
	}
	if h := s.Health; h != nil {
		fmt.Fprintf(&b, " health every %v (timeout %v, %d fails, %d passes)", h.Interval, h.Timeout, h.Fails, h.Passes)
	}
	return b.String()
}

// overrides names what applying configured onto running changes: each
// service the file removes, adds or sets otherwise than it ran (changed
// through the API since the last start, or the file was edited). Draining
// is left out: a backend kept keeps it.
func overrides(running, configured []Service) []string {
	norm := func(s Service) string {
		s.Backends = slices.Clone(s.Backends)
		for i := range s.Backends {
			s.Backends[i].Draining, s.Backends[i].Quarantined = false, false
		}
		s.SourceRanges = slices.Clone(s.SourceRanges)
		slices.SortFunc(s.SourceRanges, func(a, b netip.Prefix) int {
			return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
		})
		return s.Describe()
	}
	conf := map[ServiceKey]Service{}
	for _, s := range configured {
		conf[s.ServiceKey] = s
	}
	var out []string
	seen := map[ServiceKey]bool{}
	for _, r := range running {
		seen[r.ServiceKey] = true
		c, ok := conf[r.ServiceKey]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("service %s: running (%s), not in the file: removed", r.ServiceKey, norm(r)))
		case norm(r) != norm(c):
			out = append(out, fmt.Sprintf("service %s: running %s, the file says %s", r.ServiceKey, norm(r), norm(c)))
		}
	}
	for _, c := range configured {
		if !seen[c.ServiceKey] {
			out = append(out, fmt.Sprintf("service %s: not running (deleted since the last start?), in the file: added", c.ServiceKey))
		}
	}
	return out
}
