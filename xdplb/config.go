package xdplb

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/xdpshield/xdpshield/bpf"
)

// Limits of the program (bpf/xdplb.c's enum lb_limits).
const (
	MaxVIPs     = int(bpf.XdplbLbLimitsMAX_VIPS)
	MaxBackends = int(bpf.XdplbLbLimitsMAX_BACKENDS)
	RingSize    = int(bpf.XdplbLbLimitsRING_SIZE)
	MaxWeight   = 1000
)

// Config is the balancer's whole configuration.
type Config struct {
	// NextHop is the MAC address every encapsulated frame is sent to: the
	// router towards the backends, on the interface the balancer sits on.
	NextHop MAC `toml:"next_hop" json:"next_hop"`
	// Source4 and Source6 are the outer source addresses (the edge's own on
	// the backends' side); each is needed once a VIP of its family exists.
	Source4 netip.Addr `toml:"source4" json:"source4,omitempty"`
	Source6 netip.Addr `toml:"source6" json:"source6,omitempty"`
	// MTU is the largest outer IP packet; bigger ones pass to the stack
	// (counted as too_big). 0 means 1500.
	MTU  int   `toml:"mtu" json:"mtu,omitempty"`
	VIPs []VIP `toml:"vip" json:"vips"`
}

// MAC is a hardware address, as text ("02:00:00:00:00:03") in TOML and
// JSON.
type MAC net.HardwareAddr

func (m MAC) String() string { return net.HardwareAddr(m).String() }

// MarshalText writes the address as text.
func (m MAC) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses the address (net.ParseMAC); empty is none.
func (m *MAC) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*m = nil
		return nil
	}
	hw, err := net.ParseMAC(string(b))
	if err != nil {
		return err
	}
	*m = MAC(hw)
	return nil
}

// VIP is a virtual service and its backends.
type VIP struct {
	Addr     netip.Addr `toml:"addr" json:"addr"`
	Port     uint16     `toml:"port" json:"port"`
	Proto    string     `toml:"proto" json:"proto"` // "tcp" or "udp"
	Backends []Backend  `toml:"backend" json:"backends"`
}

// Backend is a real server behind a VIP, of the VIP's address family.
type Backend struct {
	Addr netip.Addr `toml:"addr" json:"addr"`
	// Weight is its share of new flows relative to the VIP's other
	// backends (1..MaxWeight; 0 means 1).
	Weight uint32 `toml:"weight" json:"weight,omitempty"`
	// Drain takes it out of the table for new flows; flows it serves stay.
	Drain bool `toml:"drain" json:"drain,omitempty"`
}

// String names a VIP as addr:port/proto, the label of its metrics.
func (v VIP) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(v.Addr, v.Port), v.Proto)
}

func (v VIP) proto() uint8 {
	if v.Proto == "udp" {
		return 17
	}
	return 6
}

func (b Backend) weight() uint32 {
	if b.Drain {
		return 0
	}
	if b.Weight == 0 {
		return 1
	}
	return b.Weight
}

func (c Config) mtu() int {
	if c.MTU == 0 {
		return 1500
	}
	return c.MTU
}

// Validate checks the whole configuration; Apply refuses what it refuses,
// before writing anything.
func (c Config) Validate() error {
	var errs []error
	if len(c.VIPs) > 0 && len(c.NextHop) != 6 {
		errs = append(errs, fmt.Errorf("next_hop %q: want a 6-byte MAC address", c.NextHop.String()))
	}
	if c.MTU != 0 && (c.MTU < 1280 || c.MTU > 9000) {
		errs = append(errs, fmt.Errorf("mtu %d: want 1280..9000", c.MTU))
	}
	if c.Source4.IsValid() && !c.Source4.Is4() {
		errs = append(errs, fmt.Errorf("source4 %s: not IPv4", c.Source4))
	}
	if c.Source6.IsValid() && (!c.Source6.Is6() || c.Source6.Is4In6()) {
		errs = append(errs, fmt.Errorf("source6 %s: not IPv6", c.Source6))
	}
	if len(c.VIPs) > MaxVIPs {
		errs = append(errs, fmt.Errorf("%d VIPs: at most %d", len(c.VIPs), MaxVIPs))
	}
	seen := map[string]bool{}
	pairs := 0
	// Addresses a backend must not have: a VIP's (the frame would come
	// back to the balancer and black-hole) or the outer source's (sent to
	// itself).
	own := map[netip.Addr]string{}
	for _, v := range c.VIPs {
		own[v.Addr] = "a VIP's address"
	}
	if c.Source4.IsValid() {
		own[c.Source4] = "source4"
	}
	if c.Source6.IsValid() {
		own[c.Source6] = "source6"
	}
	for _, v := range c.VIPs {
		name := v.String()
		if !v.Addr.IsValid() || v.Addr.Is4In6() {
			errs = append(errs, fmt.Errorf("vip %s: want an IPv4 or IPv6 address", name))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("vip %s: given twice", name))
		}
		seen[name] = true
		if v.Proto != "tcp" && v.Proto != "udp" {
			errs = append(errs, fmt.Errorf("vip %s: proto %q, want tcp or udp", name, v.Proto))
		}
		if v.Port == 0 {
			errs = append(errs, fmt.Errorf("vip %s: port 0", name))
		}
		if v.Addr.Is4() && !c.Source4.IsValid() {
			errs = append(errs, fmt.Errorf("vip %s: IPv4 VIP needs source4", name))
		}
		if v.Addr.Is6() && !c.Source6.IsValid() {
			errs = append(errs, fmt.Errorf("vip %s: IPv6 VIP needs source6", name))
		}
		live := 0
		mine := map[netip.Addr]bool{}
		for _, b := range v.Backends {
			if !b.Addr.IsValid() || b.Addr.Is4() != v.Addr.Is4() || b.Addr.Is4In6() {
				errs = append(errs, fmt.Errorf("vip %s: backend %s: not of the VIP's family", name, b.Addr))
				continue
			}
			if what, ok := own[b.Addr]; ok {
				errs = append(errs, fmt.Errorf("vip %s: backend %s is %s", name, b.Addr, what))
			}
			if !b.Addr.IsGlobalUnicast() {
				errs = append(errs, fmt.Errorf("vip %s: backend %s: not a unicast address", name, b.Addr))
			}
			if mine[b.Addr] {
				errs = append(errs, fmt.Errorf("vip %s: backend %s given twice", name, b.Addr))
			}
			mine[b.Addr] = true
			pairs++
			if b.Weight > MaxWeight {
				errs = append(errs, fmt.Errorf("vip %s: backend %s: weight %d, at most %d", name, b.Addr, b.Weight, MaxWeight))
			}
			if b.weight() > 0 {
				live++
			}
		}
		if live == 0 {
			errs = append(errs, fmt.Errorf("vip %s: no backend takes new flows (all drained or none)", name))
		}
	}
	// Each (VIP, backend) pair holds an id of its own.
	if pairs > MaxBackends {
		errs = append(errs, fmt.Errorf("%d backends over all VIPs: at most %d", pairs, MaxBackends))
	}
	return errors.Join(errs...)
}

// ParseProto accepts "tcp" and "udp" in any case.
func ParseProto(s string) (string, error) {
	p := strings.ToLower(s)
	if p != "tcp" && p != "udp" {
		return "", fmt.Errorf("proto %q: want tcp or udp", s)
	}
	return p, nil
}
