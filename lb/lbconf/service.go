package lbconf

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

const (
	// DefaultReverseSize is the default capacity of the per-socket state
	// LRU of the balancer's fallback (lb.StateLRU): one entry per open
	// translated socket. With lb.StateSocket the state lives on the
	// sockets and has no capacity.
	DefaultReverseSize = 1 << 16
	// MaxReverseSize bounds it: about 100 bytes of kernel memory per entry.
	MaxReverseSize = 1 << 24
	// MaxServices is how many services fit (ids 1..255; 0 counts traffic
	// to no service).
	MaxServices = 255
	// MaxBackends is how many backends fit, over all services.
	MaxBackends = 1 << 16
	// TableSlots is the size of every service's choice table (MAX_TABLE
	// in bpf/lb.c), a prime as Maglev's population wants.
	TableSlots = 16381
	// MaxServiceBackends is how many backends one service may have: the
	// Maglev paper (Eisenbud et al., NSDI 2016, section 3.4) advises a
	// table of at least 100 slots per backend, so that every backend's
	// share is even to about 1%; past it shares drift (2x at 10,000) and
	// past TableSlots some backends are never chosen.
	MaxServiceBackends = TableSlots / 100
)

// Proto is a service's transport protocol.
type Proto string

const (
	TCP Proto = "tcp"
	UDP Proto = "udp"
)

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

// WeightOf is a backend's weight: w, or DefaultWeight for 0.
func WeightOf(w uint16) uint16 {
	if w == 0 {
		return DefaultWeight
	}
	return w
}

// ValidateShape checks what ValidateService does not: weights (every
// backend keeps at least MinSlotsPerBackend slots of the table) and source
// ranges (of the VIP's family, no host bits, no duplicates).
func ValidateShape(k ServiceKey, bs []Backend, ranges []netip.Prefix, affinity time.Duration) error {
	var errs []error
	if affinity < 0 || affinity > MaxAffinity || affinity%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("service %s: affinity timeout %v: want 0 (off) or whole milliseconds up to %v", k, affinity, MaxAffinity))
	}
	var sum uint64
	for _, b := range bs {
		sum += uint64(WeightOf(b.Weight))
	}
	for _, b := range bs {
		if len(bs) > MaxServiceBackends {
			break // ValidateService says so, once
		}
		if w := uint64(WeightOf(b.Weight)); sum > 0 && w*TableSlots/sum < MinSlotsPerBackend {
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

// ValidateService checks one service on its own: every problem, joined.
func ValidateService(k ServiceKey, mode Mode, backends []netip.AddrPort) error {
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

// String formats a backend as ADDR:PORT, with "@W" for a weight other
// than DefaultWeight and " (draining)" when it is.
func (b Backend) String() string {
	s := b.Addr.String()
	if w := WeightOf(b.Weight); w != DefaultWeight {
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
		be.Weight = WeightOf(be.Weight)
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

// ValidateSet checks what no single service can, given every service's
// backends: counts, and that no VIP is also a backend's address (a socket
// would be sent to an address the balancer claims for itself).
func ValidateSet(backends map[ServiceKey][]netip.AddrPort) error {
	var errs []error
	if len(backends) > MaxServices {
		errs = append(errs, fmt.Errorf("%d services, more than the %d that fit", len(backends), MaxServices))
	}
	n := 0
	backendOf := map[netip.Addr]ServiceKey{}
	for k, bs := range backends {
		n += len(bs)
		for _, b := range bs {
			if prev, ok := backendOf[b.Addr()]; !ok || cmp.Compare(k.String(), prev.String()) < 0 {
				backendOf[b.Addr()] = k
			}
		}
	}
	if n > MaxBackends {
		errs = append(errs, fmt.Errorf("%d backends, more than the %d that fit", n, MaxBackends))
	}
	for _, k := range SortedKeys(backends) {
		if owner, ok := backendOf[k.VIP]; ok {
			errs = append(errs, fmt.Errorf("service %s: VIP %s is a backend address of service %s", k, k.VIP, owner))
		}
	}
	return errors.Join(errs...)
}

// SortedKeys returns the keys of m sorted by VIP, port and protocol.
func SortedKeys[V any](m map[ServiceKey]V) []ServiceKey {
	keys := make([]ServiceKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ServiceKey) int {
		return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto))
	})
	return keys
}

func addrsOf(bs []Backend) []netip.AddrPort {
	out := make([]netip.AddrPort, len(bs))
	for i, b := range bs {
		out[i] = b.Addr
	}
	return out
}

// Overrides names what applying configured onto running changes: each
// service the file removes, adds or sets otherwise than it ran (changed
// through the API since the last start, or the file was edited). Draining
// is left out: a backend kept keeps it.
func Overrides(running, configured []Service) []string {
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
