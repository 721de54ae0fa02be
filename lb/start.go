package lb

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Started is a balancer brought up from a Config by Start.
type Started struct {
	*LB
	// Cgroup is the cgroup v2 directory the programs are attached to.
	Cgroup string
	// Mounted is the private cgroup2 mount Start made ("" if it used the
	// host's).
	Mounted string
}

// Start validates cfg whole, resolves its cgroup (mounting a private
// cgroup2 hierarchy when the host has none), loads the programs, adds the
// services and attaches. Nothing is left behind on an error. With no
// services configured it returns nil, nil: there is nothing to balance.
func Start(cfg Config) (*Started, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	svcs, err := cfg.Services()
	if err != nil {
		return nil, err
	}
	dir, mounted, err := cfg.CgroupDir()
	s := &Started{Cgroup: dir}
	if mounted {
		s.Mounted = DefaultCgroup2Mount
	}
	if err != nil {
		return nil, errors.Join(err, s.unmount())
	}
	s.LB, err = Load(Options{ReverseSize: cfg.ReverseSize})
	if err != nil {
		return nil, errors.Join(err, s.unmount())
	}
	if err := s.AddServices(svcs); err != nil {
		return nil, errors.Join(err, s.LB.Close(), s.unmount())
	}
	if err := s.Attach(dir); err != nil {
		return nil, errors.Join(err, s.LB.Close(), s.unmount())
	}
	return s, nil
}

// Close detaches and unloads; a private cgroup2 mount Start made is
// detached lazily (the cgroup directory stays, with its processes).
func (s *Started) Close() error {
	if s == nil {
		return nil
	}
	return errors.Join(s.LB.Close(), s.unmount())
}

func (s *Started) unmount() error {
	if s.Mounted == "" {
		return nil
	}
	if err := unix.Unmount(s.Mounted, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", s.Mounted, err)
	}
	return nil
}
