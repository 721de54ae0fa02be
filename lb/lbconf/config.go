package lbconf

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/xdpshield/xdpshield/lb/cgroup2"
)

// Config is the [lb] section of the service's configuration file.
type Config struct {
	// Cgroup is the cgroup v2 directory whose processes are balanced: an
	// absolute path, or one relative to the cgroup2 hierarchy (the host's,
	// else a private mount on cgroup2.DefaultMount). Created if missing.
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
	Backends []string `toml:"backends"` // ADDR:PORT, or ADDR:PORT@WEIGHT
	// SourceRanges, when set, are the only client prefixes balanced; a
	// socket from elsewhere is refused (see Service.SourceRanges).
	SourceRanges []string `toml:"source_ranges"`
	// AffinityTimeout, when set ("10m", "3h"), turns on session affinity
	// by client with that idle timeout (see Service.Affinity).
	AffinityTimeout string `toml:"affinity_timeout"`
	// Health, when present ([lb.service.health]), probes the backends.
	Health *HealthConfig `toml:"health"`
}

// HealthConfig is [lb.service.health]; unset fields take
// DefaultHealthCheck's values.
type HealthConfig struct {
	Interval   string `toml:"interval" json:"interval,omitempty"`       // "5s"
	Timeout    string `toml:"timeout" json:"timeout,omitempty"`         // "1s"
	Fails      int    `toml:"fails" json:"fails,omitempty"`             // failures in a row that quarantine
	Passes     int    `toml:"passes" json:"passes,omitempty"`           // successes in a row that restore
	UDPRequest string `toml:"udp_request" json:"udp_request,omitempty"` // the datagram a UDP backend answers
}

// Check turns the section into a HealthCheck (nil for none), defaults
// filled in; bounds are checked with the service's (ValidateHealth).
func (hc *HealthConfig) Check() (*HealthCheck, error) {
	if hc == nil {
		return nil, nil
	}
	h := DefaultHealthCheck()
	var errs []error
	for _, d := range []struct {
		name string
		s    string
		to   *time.Duration
	}{{"health.interval", hc.Interval, &h.Interval}, {"health.timeout", hc.Timeout, &h.Timeout}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.name, err))
		}
		*d.to = v
	}
	if hc.Fails != 0 {
		h.Fails = hc.Fails
	}
	if hc.Passes != 0 {
		h.Passes = hc.Passes
	}
	h.Request = []byte(hc.UDPRequest)
	return &h, errors.Join(errs...)
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
	if c.Enabled() {
		if err := cgroup2.CheckPath(c.Cgroup); err != nil {
			errs = append(errs, fmt.Errorf("lb.cgroup: %w", err))
		}
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
		next := map[ServiceKey][]netip.AddrPort{}
		for i, s := range out {
			if _, ok := next[s.ServiceKey]; ok {
				errs = append(errs, fmt.Errorf("lb.service[%d]: service %s: already exists", i, s.ServiceKey))
				continue
			}
			next[s.ServiceKey] = addrsOf(s.Backends)
		}
		if err := ValidateSet(next); err != nil {
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
	bs, err := ParseWeighted(sc.Backends)
	if err != nil {
		errs = append(errs, err)
	}
	ranges, err := ParsePrefixes(sc.SourceRanges)
	if err != nil {
		errs = append(errs, err)
	}
	health, err := sc.Health.Check()
	if err != nil {
		errs = append(errs, err)
	}
	var aff time.Duration
	if sc.AffinityTimeout != "" {
		if aff, err = time.ParseDuration(sc.AffinityTimeout); err != nil {
			errs = append(errs, fmt.Errorf("affinity_timeout: %w", err))
		}
	}
	if len(errs) > 0 {
		return Service{}, errors.Join(errs...)
	}
	k := ServiceKey{VIP: vip, Port: uint16(sc.Port), Proto: proto}
	if err := errors.Join(ValidateService(k, mode, addrsOf(bs)), ValidateShape(k, bs, ranges, aff), ValidateHealth(k, health)); err != nil {
		return Service{}, err
	}
	return Service{ServiceKey: k, Mode: mode, Backends: bs, SourceRanges: ranges, Affinity: aff, Health: health}, nil
}

// CgroupDir resolves c.Cgroup to a cgroup v2 directory, mounting a private
// cgroup2 hierarchy on cgroup2.DefaultMount when the host has none, and
// creating the directory when missing; mounted reports that this call
// mounted the hierarchy.
func (c Config) CgroupDir() (dir string, mounted bool, err error) {
	if err := cgroup2.CheckPath(c.Cgroup); err != nil {
		return "", false, fmt.Errorf("lb.cgroup: %w", err)
	}
	dir = c.Cgroup
	if !filepath.IsAbs(dir) {
		root, m, err := cgroup2.Root(cgroup2.DefaultMount)
		if err != nil {
			return "", false, err
		}
		mounted = m
		dir = filepath.Join(root, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", mounted, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	return dir, mounted, cgroup2.Check(dir)
}
