package shield

import (
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/oldpins"
)

// Migrated says what Load copied from a pinned sources table of another
// layout or size, if it did.
func (s *Shield) Migrated() (oldpins.Migration, bool) {
	if s.migrated == nil {
		return oldpins.Migration{}, false
	}
	return *s.migrated, true
}

// Recovered reports what Load rolled back of a change a crash interrupted
// in a version before the verdict generations, if anything.
func (s *Shield) Recovered() (oldpins.Recovery, bool) {
	if s.recovered == nil {
		return oldpins.Recovery{}, false
	}
	return *s.recovered, true
}

// migrate copies the sources of old (oldpins.TakeSources) into s's table,
// the most recently seen last so that a full set keeps the most recent
// ones, and sets their bits in both presence filters; then it removes the
// pin of old in dir.
func (s *Shield) migrate(old *ebpf.Map, dir string) error {
	defer old.Close()
	srcs, from, err := oldpins.ReadSources(old)
	if err != nil {
		return fmt.Errorf("read the old sources table: %w", err)
	}
	now, err := s.ClockNow()
	if err != nil {
		return err
	}
	sets, err := s.tableSets()
	if err != nil {
		return err
	}
	words, err := s.presenceWords()
	if err != nil {
		return err
	}
	l := s.Limits()
	mig := &oldpins.Migration{From: from, To: s.TableSize(), Sources: len(srcs)}
	for i := range srcs {
		if s.placeIn(sets, words, srcs[i].Key, srcs[i], l, now) {
			mig.Replaced++
		}
	}
	mig.Moved = mig.Sources - mig.Replaced
	if err := oldpins.RemoveSources(dir); err != nil {
		return err
	}
	s.migrated = mig
	return nil
}

// PinNames are the names Load pins in a pin directory: every map of the
// program that is pinned by name, and those older versions pinned
// (oldpins.Names). pin.Detach removes these and only these (and its
// link).
func PinNames() (map[string]bool, error) {
	spec, err := bpf.LoadShield()
	if err != nil {
		return nil, fmt.Errorf("load spec: %w", err)
	}
	names := map[string]bool{}
	for _, n := range oldpins.Names() {
		names[n] = true
	}
	for name := range spec.Maps {
		if filepath.Ext(name) == "" {
			names[name] = true
		}
	}
	return names, nil
}
