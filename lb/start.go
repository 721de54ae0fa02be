package lb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/lb/cgroup2"
	"github.com/xdpshield/xdpshield/lb/lbconf"
	"github.com/xdpshield/xdpshield/lb/lbpin"
)

// Started is a balancer brought up from a Config by Start.
type Started struct {
	*LB
	// Cgroup is the cgroup v2 directory the programs are attached to.
	Cgroup string
	// Mounted is the private cgroup2 mount Start made ("" if it used the
	// host's).
	Mounted string
	// PinDir is where the links and maps are pinned ("" if they are not).
	PinDir string
	// Adopted says a pinned balancer was found and taken over: its maps
	// (reverse entries, counters, draining state) kept, its links given
	// this process's programs, the configured services applied onto it.
	Adopted bool
	// Notes are things the caller should log (kept settings, cleanups).
	Notes []string
	// Overrides are the services the configuration file set otherwise
	// than the adopted balancer ran them (changes made through the API
	// since the last start do not survive it; each is also in Notes).
	Overrides []string

	stopHealth context.CancelFunc
	healthDone chan struct{}
}

// startHealth runs the health checks of the services that have one until
// Close.
func (s *Started) startHealth() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopHealth, s.healthDone = cancel, make(chan struct{})
	go func() {
		defer close(s.healthDone)
		s.RunHealth(ctx, nil)
	}()
}

// Start validates cfg whole, resolves its cgroup (mounting a private
// cgroup2 hierarchy when the host has none), loads the programs, adds the
// services and attaches. Nothing is left behind on an error. With no
// services configured it returns nil, nil: there is nothing to balance.
func Start(cfg lbconf.Config) (*Started, error) { return StartPinned(cfg, "") }

// StartPinned is Start with the links and maps pinned under
// pinDir/lbpin.Subdir (pinDir on a bpf filesystem, held by the caller's
// lock), so the balancer keeps translating while no process holds it: a
// restart, an upgrade, a crash. A first start pins into lbpin.StagingSubdir and
// renames it into place once everything is attached. A later start adopts
// what is pinned: the maps are reused, the links get the newly loaded
// programs, and the configured services are applied whole (the config is
// the source of truth; a backend kept keeps its draining state, sockets
// keep their reverse entries). A pinned balancer that is incomplete, of an
// incompatible map layout, or attached to another cgroup is refused, with
// nothing changed: lbpin.Remove (`shield detach -lb-only`) drops it.
func StartPinned(cfg lbconf.Config, pinDir string) (*Started, error) {
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
		s.Mounted = cgroup2.DefaultMount
	}
	if err != nil {
		return nil, errors.Join(err, s.unmount())
	}
	if pinDir != "" {
		s.PinDir = filepath.Join(pinDir, lbpin.Subdir)
		if lbpin.Pinned(pinDir) {
			if err := s.adopt(cfg, svcs); err != nil {
				return nil, errors.Join(err, s.unmount())
			}
			s.startHealth()
			return s, nil
		}
	}
	pinPath := ""
	if pinDir != "" {
		// A staging directory left by a start that died half-way: its
		// links were never published; remove them.
		staging := filepath.Join(pinDir, lbpin.StagingSubdir)
		if _, err := os.Stat(staging); err == nil {
			if err := lbpin.Remove(staging); err != nil {
				return nil, errors.Join(fmt.Errorf("remove an interrupted start's pins: %w", err), s.unmount())
			}
			s.Notes = append(s.Notes, "removed "+staging+", left by a start that did not finish")
		}
		if err := os.Mkdir(staging, 0o700); err != nil {
			return nil, errors.Join(fmt.Errorf("create %s: %w", staging, err), s.unmount())
		}
		pinPath = staging
	}
	fail := func(err error) (*Started, error) {
		if s.LB != nil {
			err = errors.Join(err, s.LB.Close())
		}
		if pinPath != "" {
			err = errors.Join(err, lbpin.Remove(pinPath))
		}
		return nil, errors.Join(err, s.unmount())
	}
	s.LB, err = Load(Options{ReverseSize: cfg.ReverseSize, PinPath: pinPath})
	if err != nil {
		return fail(err)
	}
	if err := s.AddServices(svcs); err != nil {
		return fail(err)
	}
	if err := s.Attach(dir); err != nil {
		return fail(err)
	}
	if pinPath != "" {
		if err := os.Rename(pinPath, s.PinDir); err != nil {
			return fail(fmt.Errorf("publish the pins: %w", err))
		}
	}
	s.startHealth()
	return s, nil
}

// adopt takes over the balancer pinned in s.PinDir (see StartPinned).
func (s *Started) adopt(cfg lbconf.Config, svcs []lbconf.Service) error {
	if err := lbpin.Check(s.PinDir, s.Cgroup); err != nil {
		return fmt.Errorf("%w; the pinned balancer stays as it is: `shield detach -lb-only` drops it "+
			"(sockets it translated keep their backends)", err)
	}
	size := cfg.ReverseSize
	if m, err := ebpf.LoadPinnedMap(filepath.Join(s.PinDir, bpf.LbMapReverse), nil); err == nil {
		// One entry: a StateSocket balancer, whose LRU is unused.
		if pinned := m.MaxEntries(); pinned != size && pinned != 1 {
			s.Notes = append(s.Notes, fmt.Sprintf("keeping the pinned reverse_size %d (configured %d): `shield detach -lb-only` first to change it", pinned, size))
			size = pinned
		}
		m.Close()
	}
	l, err := Load(Options{ReverseSize: size, PinPath: s.PinDir})
	if err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return fmt.Errorf("the maps pinned in %s belong to an incompatible version of the balancer, which stays attached; "+
				"`shield detach -lb-only` drops it (sockets it translated keep their backends): %w", s.PinDir, err)
		}
		return err
	}
	if err := l.readState(); err != nil {
		return errors.Join(err, l.Close())
	}
	if err := l.adoptLinks(s.PinDir); err != nil {
		return errors.Join(err, l.Close())
	}
	// The file is the source of truth at a start: say what it undoes of
	// the running balancer (API changes since the last start, above all).
	for _, o := range lbconf.Overrides(l.Services(), svcs) {
		s.Overrides = append(s.Overrides, o)
		s.Notes = append(s.Notes, "the configuration file overrides the running balancer: "+o)
	}
	draining, err := l.ReplaceServices(svcs)
	if err != nil {
		return errors.Join(fmt.Errorf("apply the configured services to the pinned balancer: %w", err), l.Close())
	}
	if len(draining) > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("kept draining (drained before the restart): %v", draining))
	}
	s.LB, s.Adopted = l, true
	return nil
}

// Close detaches and unloads (pinned links stay attached and pinned maps
// keep their state: lbpin.Remove removes them); a private cgroup2 mount
// Start made is detached lazily (the cgroup directory stays, with its
// processes).
func (s *Started) Close() error {
	if s == nil {
		return nil
	}
	if s.stopHealth != nil {
		s.stopHealth()
		<-s.healthDone
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
