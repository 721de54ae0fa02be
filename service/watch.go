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

// Detach takes the program off the interface on purpose (the storms'
// contrast run): the service then reports unhealthy, logged at INFO, and
// does not attach again. The maps stay pinned; Close still releases them.
func (s *Service) Detach() error {
	s.detached.Store(true)
	return s.att.Detach()
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
	case !ok && s.detached.Load() && (was || problem != wasProblem):
		s.log.Info("not protecting: "+problem, keyIface, s.cfg.Iface)
	case !ok && (was || problem != wasProblem):
		s.log.Error("NOT PROTECTING: "+problem, keyIface, s.cfg.Iface)
	}
}

// watch follows the interface through netlink in the service's network
// namespace: when it is deleted the service reports unhealthy, when an
// interface of the same name appears the program is attached to it again
// (same maps and state), and when the program is taken off it says so.
func (s *Service) watch(ns netns.NsHandle) error {
	// A netlink socket belongs to the namespace it is made in. Made on a
	// thread inside ns already (a `shield serve` process, always), it needs
	// no setns, which only CAP_SYS_ADMIN may do: the least-privilege set
	// (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON) runs the service.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	opts := netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case <-s.stop: // the subscription closing
			default:
				s.log.Warn("netlink link watch; checking every "+reconcileEvery.String(), keyErr, err)
			}
		},
	}
	var h *netlink.Handle
	var err error
	if inside(ns) {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
		opts.Namespace = &ns
	}
	if err != nil {
		return fmt.Errorf("netlink in the service's namespace: %w", err)
	}
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, opts); err != nil {
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
	if s.detached.Load() {
		s.setHealth(false, "the program was taken off "+s.cfg.Iface+" on purpose (Service.Detach)")
		return
	}
	l, err := h.LinkByName(s.cfg.Iface)
	var nf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &nf) || errors.Is(err, unix.ENODEV):
		s.setHealth(false, fmt.Sprintf("interface %s is gone; the program is attached again when it comes back", s.cfg.Iface))
	case err != nil:
		s.log.Warn("inspect interface", keyIface, s.cfg.Iface, keyErr, err)
	// A new index, or the same one given to a new instance (`ip link add
	// ... index N`): the link says its device is gone either way.
	case l.Attrs().Index != a.Ifindex || a.LinkDefunct():
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

// inside reports whether the calling thread (locked by the caller) is in ns.
func inside(ns netns.NsHandle) bool {
	cur, err := netns.Get()
	if err != nil {
		return false
	}
	defer cur.Close()
	return cur.Equal(ns)
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
	if orig.Equal(ns) { // there already: no setns (CAP_SYS_ADMIN)
		defer runtime.UnlockOSThread()
		return fn()
	}
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
