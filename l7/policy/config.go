package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Bounds shared by the proxy and the data plane: a configuration beyond them
// is refused whole, so both enforce the same policy or none is applied.
const (
	MaxRoutes        = 8   // routes in a configuration
	MaxBackends      = 16  // backends in one route's pool
	MaxRules         = 8   // RBAC rules
	MaxPrefixLen     = 64  // bytes of a path prefix
	MaxHostLen       = 32  // bytes of a route's Host
	MaxHeaderValLen  = 32  // bytes of a header value matched by a rule or set
	MaxHeaderNameLen = 32  // bytes of a header name
	RingSlots        = 256 // slots of each route's consistent-hash table
)

// Config is the whole L7 policy: the proxy and the data plane are both driven
// by it.
type Config struct {
	// Routes map a request (Host, path prefix) to a backend pool. The route
	// with the longest matching prefix among those naming the request's
	// Host wins; routes without Host are tried next, longest prefix first.
	// A request matching none is answered 404.
	Routes []Route `toml:"route" json:"route"`
	// RBAC rules, first match wins; a request no rule matches is allowed.
	// A denied request is answered 403 and never reaches a backend.
	RBAC []Rule `toml:"rbac,omitempty" json:"rbac,omitempty"`
	// HashHeader names the header whose value picks a backend within a pool
	// (a Ketama-style ring of RingSlots slots). Empty: the empty value,
	// so every request of a route goes to one backend.
	HashHeader string `toml:"hash_header,omitempty" json:"hash_header,omitempty"`
	// SetHeader, when Name is set, is added to every proxied request,
	// replacing any value the client sent.
	SetHeader Header `toml:"set_header,omitempty" json:"set_header,omitempty"`
}

// Route sends requests for Host (any when empty) whose path starts with
// PathPrefix to one of Backends ("IP:port").
type Route struct {
	Name       string   `toml:"name" json:"name"`
	Host       string   `toml:"host,omitempty" json:"host,omitempty"`
	PathPrefix string   `toml:"path_prefix" json:"path_prefix"`
	Backends   []string `toml:"backends" json:"backends"`
}

// Rule matches a request when every condition set matches: method (any of
// Methods), path prefix, source address within Source, header Header equal
// to Value. Action is "allow" or "deny".
type Rule struct {
	Name       string   `toml:"name,omitempty" json:"name,omitempty"`
	Action     string   `toml:"action" json:"action"`
	Methods    []string `toml:"methods,omitempty" json:"methods,omitempty"`
	PathPrefix string   `toml:"path_prefix,omitempty" json:"path_prefix,omitempty"`
	Source     string   `toml:"source,omitempty" json:"source,omitempty"`
	Header     string   `toml:"header,omitempty" json:"header,omitempty"`
	Value      string   `toml:"value,omitempty" json:"value,omitempty"`
}

// Header is a header name and value.
type Header struct {
	Name  string `toml:"name" json:"name"`
	Value string `toml:"value" json:"value"`
}

// hopByHop are the headers a proxy does not forward (RFC 9110 7.6.1) and
// headers that frame the message: none may be set by SetHeader.
var hopByHop = map[string]bool{
	"connection": true, "proxy-connection": true, "keep-alive": true,
	"proxy-authenticate": true, "proxy-authorization": true, "te": true,
	"trailer": true, "transfer-encoding": true, "upgrade": true,
	"content-length": true, "host": true, "expect": true,
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue: visible ASCII and inner spaces, as the data plane compares.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return strings.TrimSpace(s) == s
}

func validHost(s string) bool {
	if s == "" || len(s) > MaxHostLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == ':') {
			return false
		}
	}
	return true
}

func validPrefix(s string) bool {
	if s == "" || s[0] != '/' || len(s) > MaxPrefixLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f || s[i] == '?' || s[i] == '#' {
			return false
		}
	}
	// Requests are judged by their normal path (NormalPath): a prefix in
	// another form would match none of them.
	n, err := NormalPath(s)
	return err == nil && n == s
}

// Validate checks the configuration whole and returns every problem, each
// naming the field as written.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Routes) == 0 {
		bad("l7.route: at least one route is needed")
	}
	if len(c.Routes) > MaxRoutes {
		bad("l7.route: %d routes, at most %d", len(c.Routes), MaxRoutes)
	}
	names := map[string]bool{}
	keys := map[string]bool{}
	for i, r := range c.Routes {
		at := fmt.Sprintf("l7.route[%d]", i)
		if r.Name == "" {
			bad("%s.name: empty", at)
		} else if names[r.Name] {
			bad("%s.name: %q used twice", at, r.Name)
		}
		names[r.Name] = true
		if r.Host != "" && !validHost(r.Host) {
			bad("%s.host: %q is not a lowercase host[:port] of at most %d bytes", at, r.Host, MaxHostLen)
		}
		if !validPrefix(r.PathPrefix) {
			bad("%s.path_prefix: %q must start with / and hold at most %d visible bytes (no ? or #), in normal form (no dot-segment, //, or escape of an unreserved character)", at, r.PathPrefix, MaxPrefixLen)
		}
		if k := r.Host + " " + r.PathPrefix; keys[k] {
			bad("%s: host %q and path_prefix %q already routed", at, r.Host, r.PathPrefix)
		} else {
			keys[k] = true
		}
		if len(r.Backends) == 0 || len(r.Backends) > MaxBackends {
			bad("%s.backends: %d backends, need 1 to %d", at, len(r.Backends), MaxBackends)
		}
		seen := map[netip.AddrPort]bool{}
		for j, b := range r.Backends {
			ap, err := netip.ParseAddrPort(b)
			if err != nil || ap.Port() == 0 {
				bad("%s.backends[%d]: %q is not IP:port", at, j, b)
				continue
			}
			if seen[ap] {
				bad("%s.backends[%d]: %q listed twice", at, j, b)
			}
			seen[ap] = true
		}
	}
	if len(c.RBAC) > MaxRules {
		bad("l7.rbac: %d rules, at most %d", len(c.RBAC), MaxRules)
	}
	ruleNames := map[string]bool{}
	for i, r := range c.RBAC {
		at := fmt.Sprintf("l7.rbac[%d]", i)
		// Rules are counted by name (rbac[i] when unnamed): names are
		// label values and must not collide.
		if n := RuleName(r, i); ruleNames[n] {
			bad("%s.name: %q used twice", at, n)
		} else {
			ruleNames[n] = true
		}
		if r.Action != "allow" && r.Action != "deny" {
			bad("%s.action: %q, want allow or deny", at, r.Action)
		}
		for j, m := range r.Methods {
			if _, ok := methodBits[m]; !ok {
				bad("%s.methods[%d]: %q, want one of GET HEAD POST PUT DELETE PATCH OPTIONS", at, j, m)
			}
		}
		if r.PathPrefix != "" && !validPrefix(r.PathPrefix) {
			bad("%s.path_prefix: %q must start with / and hold at most %d visible bytes (no ? or #), in normal form (no dot-segment, //, or escape of an unreserved character)", at, r.PathPrefix, MaxPrefixLen)
		}
		if r.Source != "" {
			if _, err := netip.ParsePrefix(r.Source); err != nil {
				bad("%s.source: %q is not a CIDR prefix", at, r.Source)
			}
		}
		if r.Header != "" {
			if !isToken(r.Header) || len(r.Header) > MaxHeaderNameLen {
				bad("%s.header: %q is not a header name of at most %d bytes", at, r.Header, MaxHeaderNameLen)
			}
			if !validValue(r.Value) || len(r.Value) > MaxHeaderValLen {
				bad("%s.value: %d bytes (not shown: values may be secrets) must be visible ASCII of at most %d bytes", at, len(r.Value), MaxHeaderValLen)
			}
		} else if r.Value != "" {
			bad("%s.value: set without header", at)
		}
	}
	if c.HashHeader != "" && (!isToken(c.HashHeader) || len(c.HashHeader) > MaxHeaderNameLen) {
		bad("l7.hash_header: %q is not a header name of at most %d bytes", c.HashHeader, MaxHeaderNameLen)
	}
	if c.SetHeader.Name != "" {
		if !isToken(c.SetHeader.Name) || len(c.SetHeader.Name) > MaxHeaderNameLen {
			bad("l7.set_header.name: %q is not a header name of at most %d bytes", c.SetHeader.Name, MaxHeaderNameLen)
		} else if hopByHop[strings.ToLower(c.SetHeader.Name)] {
			bad("l7.set_header.name: %q frames the message or is hop-by-hop", c.SetHeader.Name)
		}
		if !validValue(c.SetHeader.Value) || len(c.SetHeader.Value) > MaxHeaderValLen {
			bad("l7.set_header.value: %d bytes (not shown: values may be secrets) must be visible ASCII of at most %d bytes", len(c.SetHeader.Value), MaxHeaderValLen)
		}
	} else if c.SetHeader.Value != "" {
		bad("l7.set_header.value: set without name")
	}
	return errors.Join(errs...)
}

// methodBits numbers the methods a rule may name (bit i of a rule's mask).
var methodBits = map[string]uint32{
	"GET": 1 << 0, "HEAD": 1 << 1, "POST": 1 << 2, "PUT": 1 << 3,
	"DELETE": 1 << 4, "PATCH": 1 << 5, "OPTIONS": 1 << 6,
}

// RuleName is a rule's name, or rbac[i] for a rule without one.
func RuleName(r Rule, i int) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("rbac[%d]", i)
}
