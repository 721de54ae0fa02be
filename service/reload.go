package service

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// Reload is what a configuration reload changes while the service runs
// (SIGHUP under systemd): the limits and the lists' configured entries.
// Everything else (interface, table, API, balancer, L7) keeps running as
// it was started.
type Reload struct {
	// Limits replace the running ones (zero: config.DefaultLimits).
	Limits config.Limits
	// Allow and Deny are the lists' configured entries: those the last
	// configuration named and this one does not are taken off, new ones
	// put on; entries added through the API are kept.
	Allow, Deny []netip.Prefix
}

// Reload applies r all or nothing: the limits are checked before anything
// is written, and when a list's write fails every change already made is
// undone (the limits put back, the lists' entries restored). Each map
// write is atomic for the data path; the set of them is not one instant.
func (s *Service) Reload(r Reload) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	sh := s.att.Shield
	if r.Limits.IsZero() {
		r.Limits = config.DefaultLimits()
	}
	old, err := sh.ReplaceLimits(r.Limits)
	if err != nil {
		return fmt.Errorf("limits: %w (nothing was changed)", err)
	}
	undo := []func() error{func() error { return sh.SetLimits(old) }}
	rollback := func(err error) error {
		for i := len(undo) - 1; i >= 0; i-- {
			if e := undo[i](); e != nil {
				err = errors.Join(err, fmt.Errorf("undo: %w", e))
			}
		}
		return err
	}
	lists := []struct {
		l          lists.List
		prev, next []netip.Prefix
	}{{lists.AllowList, s.cfg.Allow, r.Allow}, {lists.DenyList, s.cfg.Deny, r.Deny}}
	for _, x := range lists {
		listed, err := sh.List(x.l)
		if err != nil {
			return rollback(fmt.Errorf("%s list: %w", x.l, err))
		}
		var gone []netip.Prefix
		for _, p := range x.prev {
			if !slices.Contains(x.next, p) && slices.Contains(listed, p) && !slices.Contains(gone, p) {
				gone = append(gone, p)
			}
		}
		l := x.l
		if len(x.next) > 0 {
			ch, err := sh.Add(l, x.next)
			if err != nil {
				return rollback(fmt.Errorf("%s list: %w", l, err))
			}
			if added := ch.Added; len(added) > 0 {
				undo = append(undo, func() error { _, err := sh.Remove(l, added); return err })
				s.log.Info("list changed", keyWho, "reload", keyWhat, l.String()+" add", keyItems, added,
					keyOld, ch.Before, keyNew, len(ch.After))
			}
		}
		if len(gone) > 0 {
			ch, err := sh.Remove(l, gone)
			if err != nil {
				return rollback(fmt.Errorf("%s list: %w", l, err))
			}
			removed := ch.Removed
			undo = append(undo, func() error { _, err := sh.Add(l, removed); return err })
			s.log.Info("list changed", keyWho, "reload", keyWhat, l.String()+" remove", keyItems, removed,
				keyOld, ch.Before, keyNew, len(ch.After))
		}
	}
	if !old.Equal(r.Limits) {
		s.log.Info("limits changed", keyWho, "reload", keyOld, old, keyNew, sh.Limits())
	}
	s.cfg.Limits, s.cfg.Allow, s.cfg.Deny = r.Limits, slices.Clone(r.Allow), slices.Clone(r.Deny)
	return nil
}
