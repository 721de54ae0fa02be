package policy

import (
	"errors"
	"fmt"
	"net/netip"
)

// Section is the [l7] section of shield serve's configuration: where the
// proxy listens, whether the fast path is tried, and the policy
// ([[l7.route]], [[l7.rbac]], hash_header, [l7.set_header]).
type Section struct {
	// Listen is the proxy's TCP address (IP:port), in serve's namespace.
	Listen string `toml:"listen"`
	// FastPath is "auto" (or empty): load the kernel's fast path when the
	// kernel can run it, else the proxy alone serves; "off": the proxy
	// alone.
	FastPath string `toml:"fast_path"`
	Config
}

// Enabled reports whether the section says anything: an empty [l7] (or
// none) runs no proxy.
func (s Section) Enabled() bool {
	return s.Listen != "" || s.FastPath != "" || len(s.Routes) > 0 || len(s.RBAC) > 0 ||
		s.HashHeader != "" || s.SetHeader != (Header{})
}

// Validate checks the section whole (the policy included) and returns every
// problem, each naming its key; a section that says nothing is valid.
func (s Section) Validate() error {
	if !s.Enabled() {
		return nil
	}
	var errs []error
	if s.Listen == "" {
		errs = append(errs, errors.New("l7.listen: empty (the proxy's IP:port)"))
	} else if ap, err := netip.ParseAddrPort(s.Listen); err != nil || ap.Port() == 0 {
		errs = append(errs, fmt.Errorf("l7.listen: %q is not IP:port with a port", s.Listen))
	}
	switch s.FastPath {
	case "", "auto", "off":
	default:
		errs = append(errs, fmt.Errorf("l7.fast_path: %q, want auto or off", s.FastPath))
	}
	if err := s.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if ap, err := netip.ParseAddrPort(s.Listen); err == nil {
		errs = append(errs, Loops(ap, s.Config, nil))
	}
	return errors.Join(errs...)
}

// Loops names each backend of c that is the proxy itself, which would
// send every request it routes there back to itself, and so on until its
// file descriptors run out: listen's own address and port, or, when listen
// is unspecified, a loopback, unspecified or local address (of the
// namespace: at Listen, and anew at each Replace) with listen's port, of
// either family: Go's
// net.Listen("tcp", "0.0.0.0:p") listens on [::]:p, which takes both.
func Loops(listen netip.AddrPort, c Config, local []netip.Addr) error {
	l := listen.Addr().Unmap()
	isLocal := func(a netip.Addr) bool {
		if a.IsLoopback() || a.IsUnspecified() {
			return true
		}
		for _, x := range local {
			if x.Unmap().WithZone("") == a.WithZone("") {
				return true
			}
		}
		return false
	}
	var errs []error
	for i, r := range c.Routes {
		for j, b := range r.Backends {
			ap, err := netip.ParseAddrPort(b)
			if err != nil || ap.Port() != listen.Port() {
				continue
			}
			a := ap.Addr().Unmap()
			self := a == l
			if l.IsUnspecified() {
				self = self || isLocal(a)
			}
			if self {
				errs = append(errs, fmt.Errorf("l7.route[%d].backends[%d]: %q is the proxy's own l7.listen %s: its requests would come back to it", i, j, b, listen))
			}
		}
	}
	return errors.Join(errs...)
}
