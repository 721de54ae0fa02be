package service

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// reconcileEvery is how often the watcher checks the interface even when
// netlink said nothing (a lost event must not leave it wrong for long).
const reconcileEvery = 2 * time.Second

// health is whether the program protects the interface now.
type health struct {
	mu      sync.Mutex
	ok      bool
	problem string
}

func (h *health) get() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok, h.problem
}

// Healthy reports whether the program protects the interface now, and if
// not why (interface gone, program detached).
func (s *Service) Healthy() (bool, string) { return s.health.get() }

// setHealth records the state and logs a change of it: an ERROR when the
// interface stops being protected, an INFO when it is again.
func (s *Service) setHealth(ok bool, problem string) {
	s.health.mu.Lock()
	was, wasProblem := s.health.ok, s.health.problem
	s.health.ok, s.health.problem = ok, problem
	s.health.mu.Unlock()
	switch {
	case ok && !was:
		s.log.Info("protecting the interface again", keyIface, s.cfg.Iface, keyLinkID, s.att.LinkID)
	case !ok && (was || problem != wasProblem):
		s.log.Error("NOT PROTECTING: "+problem, keyIface, s.cfg.Iface)
	}
}

// watch follows the interface through netlink in the service's network
// namespace: when it is deleted the service reports unhealthy, when an
// interface of the same name appears the program is attached to it again
// (same maps and state), and when the program is taken off it says so.
func (s *Service) watch(ns netns.NsHandle) error {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in the service's namespace: %w", err)
	}
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		Namespace: &ns,
		ErrorCallback: func(err error) {
			select {
			case <-s.stop: // the subscription closing
			default:
				s.log.Warn("netlink link watch; checking every "+reconcileEvery.String(), keyErr, err)
			}
		},
	}); err != nil {
		h.Close()
		return fmt.Errorf("watch links: %w", err)
	}
	s.health.ok = true
	s.watchDone = make(chan struct{})
	go func() {
		defer close(s.watchDone)
		defer h.Close()
		defer ns.Close()
		tick := time.NewTicker(reconcileEvery)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				close(done)
				if updates != nil {
					for range updates { // drained until the subscription closes it
					}
				}
				return
			case u, ok := <-updates:
				if !ok {
					updates = nil
					continue
				}
				if int(u.Index) != s.att.Ifindex && u.Attrs().Name != s.cfg.Iface {
					continue
				}
			case <-tick.C:
			}
			s.reconcile(h, ns)
		}
	}()
	return nil
}

// reconcile compares the interface with what the service believes.
func (s *Service) reconcile(h *netlink.Handle, ns netns.NsHandle) {
	a := s.att
	l, err := h.LinkByName(s.cfg.Iface)
	var nf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &nf) || errors.Is(err, unix.ENODEV):
		s.setHealth(false, fmt.Sprintf("interface %s is gone; the program is attached again when it comes back", s.cfg.Iface))
	case err != nil:
		s.log.Warn("inspect interface", keyIface, s.cfg.Iface, keyErr, err)
	case l.Attrs().Index != a.Ifindex:
		old := a.Ifindex
		err := inNetns(ns, func() error { return a.Reattach(l.Attrs().Index) })
		if err != nil {
			s.setHealth(false, fmt.Sprintf("interface %s is back (index %d) but the program could not be attached: %v",
				s.cfg.Iface, l.Attrs().Index, err))
			return
		}
		s.log.Info("interface re-created; program attached again", keyIface, s.cfg.Iface,
			keyOldIndex, old, keyIndex, a.Ifindex, keyLinkID, a.LinkID, keyMode, a.Mode.String())
		s.setHealth(true, "")
	case l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached:
		s.setHealth(false, fmt.Sprintf("no XDP program is attached to %s (detached?)", s.cfg.Iface))
	case l.Attrs().Xdp.ProgId != uint32(a.Program):
		s.setHealth(false, fmt.Sprintf("another XDP program (id %d) runs on %s", l.Attrs().Xdp.ProgId, s.cfg.Iface))
	default:
		s.setHealth(true, "")
	}
}

// inNetns runs fn on a locked OS thread inside ns: a link is created for
// an interface index of the calling thread's namespace.
func inNetns(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter the service's netns: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return ferr // the thread stays locked and dies with its goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}
