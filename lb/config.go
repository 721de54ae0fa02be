package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// Config is the [lb] section of the service's configuration file.
type Config struct {
	// Cgroup is the cgroup v2 directory whose processes are balanced: an
	// absolute path, or one relative to the cgroup2 hierarchy (the host's,
	// else a private mount on DefaultCgroup2Mount). Created if missing.
	Cgroup string `toml:"cgroup"`
	// ReverseSize is the capacity of the reverse-translation LRU.
	ReverseSize uint32 `toml:"reverse_size"`
	// Service lists the services ([[lb.service]]).
	Service []ServiceConfig `toml:"service"`
}

// ServiceConfig is one [[lb.service]] entry.
type ServiceConfig struct {
	VIP      string   `toml:"vip"`
	Port     int      `toml:"port"`
	Protocol string   `toml:"protocol"` // tcp (default) or udp
	Mode     string   `toml:"mode"`     // random (default) or maglev
	Backends []string `toml:"backends"` // ADDR:PORT
}

// DefaultConfig is the [lb] section when the file says nothing: no services,
// so nothing is loaded.
func DefaultConfig() Config {
	return Config{Cgroup: "xdpshield", ReverseSize: DefaultReverseSize}
}

// Enabled reports whether the configuration asks for a balancer.
func (c Config) Enabled() bool { return len(c.Service) > 0 }

// Services validates the configuration whole and returns its services;
// every problem is reported, each naming its entry.
func (c Config) Services() ([]Service, error) {
	var errs []error
	if c.ReverseSize == 0 || c.ReverseSize > MaxReverseSize {
		errs = append(errs, fmt.Errorf("lb.reverse_size: %d out of range [1, %d]", c.ReverseSize, MaxReverseSize))
	}
	if c.Enabled() && c.Cgroup == "" {
		errs = append(errs, errors.New("lb.cgroup: empty (the cgroup v2 directory to balance)"))
	}
	var out []Service
	for i, sc := range c.Service {
		s, err := sc.service()
		if err != nil {
			errs = append(errs, fmt.Errorf("lb.service[%d]: %w", i, err))
			continue
		}
		out = append(out, s)
	}
	if len(errs) == 0 {
		// What only the whole set can tell: duplicates, a VIP that is a
		// backend of another service.
		next := map[ServiceKey]*service{}
		for i, s := range out {
			if _, ok := next[s.ServiceKey]; ok {
				errs = append(errs, fmt.Errorf("lb.service[%d]: service %s: already exists", i, s.ServiceKey))
				continue
			}
			ns := &service{mode: s.Mode}
			for _, b := range s.Backends {
				ns.backends = append(ns.backends, backend{addr: b.Addr})
			}
			next[s.ServiceKey] = ns
		}
		if err := validateAll(next); err != nil {
			errs = append(errs, fmt.Errorf("lb: %w", err))
		}
	}
	return out, errors.Join(errs...)
}

func (sc ServiceConfig) service() (Service, error) {
	var errs []error
	vip, err := netip.ParseAddr(sc.VIP)
	if err != nil {
		errs = append(errs, fmt.Errorf("vip: %w", err))
	}
	if sc.Port < 1 || sc.Port > 65535 {
		errs = append(errs, fmt.Errorf("port: %d out of range [1, 65535]", sc.Port))
	}
	proto := Proto(sc.Protocol)
	if proto == "" {
		proto = TCP
	}
	mode := Mode(sc.Mode)
	if mode == "" {
		mode = Random
	}
	addrs, err := ParseBackends(sc.Backends)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Service{}, errors.Join(errs...)
	}
	k := ServiceKey{VIP: vip, Port: uint16(sc.Port), Proto: proto}
	if err := validateService(k, mode, addrs); err != nil {
		return Service{}, err
	}
	return Service{ServiceKey: k, Mode: mode, Backends: toBackends(addrs)}, nil
}

func toBackends(as []netip.AddrPort) []Backend {
	out := make([]Backend, len(as))
	for i, a := range as {
		out[i] = Backend{Addr: a}
	}
	return out
}

// CgroupDir resolves c.Cgroup to a cgroup v2 directory, mounting a private
// cgroup2 hierarchy on DefaultCgroup2Mount when the host has none, and
// creating the directory when missing; mounted reports that this call
// mounted the hierarchy.
func (c Config) CgroupDir() (dir string, mounted bool, err error) {
	dir = c.Cgroup
	if !filepath.IsAbs(dir) {
		root, m, err := Cgroup2Root(DefaultCgroup2Mount)
		if err != nil {
			return "", false, err
		}
		mounted = m
		dir = filepath.Join(root, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", mounted, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	return dir, mounted, IsCgroup2(dir)
}
