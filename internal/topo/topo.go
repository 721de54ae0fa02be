package topo

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Prefix starts the name of every namespace this package creates.
const Prefix = "xdps-"

const netnsDir = "/run/netns"

// NS is a named network namespace created by New.
type NS struct {
	Name   string
	handle netns.NsHandle
	self   bool // Self: the process's own namespace, neither named nor removed
}

// prepareRunDir makes /run/netns a shared mount point, as `ip netns add`
// does before its first namespace. Without it, the first `ip netns add` run
// by anyone (another test package, an operator) while our namespaces exist
// bind-mounts /run/netns over itself: our nsfs mounts are hidden beneath,
// their unmount misses and their files cannot be removed (EBUSY). Done once
// per process; on a machine where iproute2 prepared the directory already,
// only the idempotent make-shared step runs.
var prepareRunDir = sync.OnceValue(func() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", netnsDir, err)
	}
	bound := false
	for {
		err := syscall.Mount("", netnsDir, "none", syscall.MS_SHARED|syscall.MS_REC, "")
		if err == nil {
			return nil
		}
		// EINVAL: not a mount point yet; make it one, once.
		if !errors.Is(err, syscall.EINVAL) || bound {
			return fmt.Errorf("mount --make-rshared %s: %w", netnsDir, err)
		}
		if err := syscall.Mount(netnsDir, netnsDir, "none", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("mount --rbind %s %s: %w", netnsDir, netnsDir, err)
		}
		bound = true
	}
})

// New creates the namespace Prefix+role+"-"+pid with its loopback up. The pid
// suffix lets CleanupStale tell a crashed run's namespaces from live ones.
func New(role string) (*NS, error) {
	name := fmt.Sprintf("%s%s-%d", Prefix, role, os.Getpid())
	if err := prepareRunDir(); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the new namespace; let it die with it.
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("return to original netns: %w", err)
	}
	ns := &NS{Name: name, handle: h}
	if err := ns.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		ns.Close()
		return nil, fmt.Errorf("loopback up in %s: %w", name, err)
	}
	return ns, nil
}

// Attach names the network namespace of process pid (a container's) as
// Prefix+role+"-"+ourPID under /run/netns, as `ip netns attach` does, so Do
// and Command work in it as in one New made. Close removes the name only:
// the namespace lives as long as its process.
func Attach(role string, pid int) (*NS, error) {
	name := fmt.Sprintf("%s%s-%d", Prefix, role, os.Getpid())
	if err := prepareRunDir(); err != nil {
		return nil, err
	}
	src := fmt.Sprintf("/proc/%d/ns/net", pid)
	p := filepath.Join(netnsDir, name)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	f.Close()
	if err := syscall.Mount(src, p, "none", syscall.MS_BIND, ""); err != nil {
		os.Remove(p)
		return nil, fmt.Errorf("bind %s to %s: %w", src, p, err)
	}
	h, err := netns.GetFromPath(p)
	if err != nil {
		deleteNamed(name)
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return &NS{Name: name, handle: h}, nil
}

// Self is the calling thread's network namespace (a container's own, for a
// process running in it). Command is not available; Close only closes the
// handle.
func Self() (*NS, error) {
	h, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("get current netns: %w", err)
	}
	return &NS{Name: "self", handle: h, self: true}, nil
}

// Do runs fn on a locked OS thread inside the namespace.
func (n *NS) Do(fn func() error) error {
	if n.self {
		return fn() // every thread is there already (and setns may be denied)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		return fmt.Errorf("enter %s: %w", n.Name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("cannot return to the original netns: %v", err))
	}
	return ferr
}

// Command returns cmd run inside the namespace (through `ip netns exec`).
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Close deletes the namespace; its links go with it.
func (n *NS) Close() error {
	if n == nil {
		return nil
	}
	n.handle.Close()
	if n.self {
		return nil
	}
	if err := deleteNamed(n.Name); err != nil {
		return fmt.Errorf("delete netns %s: %w", n.Name, err)
	}
	return nil
}

// deleteNamed unmounts and removes /run/netns/name. A file that is no mount
// point (left by a mount namespace that is gone) is only removed; a missing
// one is no error.
func deleteNamed(name string) error {
	p := filepath.Join(netnsDir, name)
	if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Veth creates a veth pair with one end (aName) in a and the other (bName)
// in b, both up. The pair is created inside a, never in the root namespace.
func Veth(a *NS, aName string, b *NS, bName string) error {
	return a.Do(func() error {
		la := netlink.NewLinkAttrs()
		la.Name = aName
		v := &netlink.Veth{LinkAttrs: la, PeerName: bName, PeerNamespace: netlink.NsFd(int(b.handle))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("add veth %s/%s: %w", aName, bName, err)
		}
		l, err := netlink.LinkByName(aName)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		return b.Do(func() error {
			l, err := netlink.LinkByName(bName)
			if err != nil {
				return err
			}
			return netlink.LinkSetUp(l)
		})
	})
}

// AddAddr adds cidr (e.g. "198.18.0.1/24", "2001:db8::1/64") to dev in n.
// IPv6 duplicate address detection is skipped: the address is usable at once.
func (n *NS) AddAddr(dev, cidr string) error {
	return n.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("find %s in %s: %w", dev, n.Name, err)
		}
		a, err := netlink.ParseAddr(cidr)
		if err != nil {
			return fmt.Errorf("parse %q: %w", cidr, err)
		}
		a.Flags |= syscall.IFA_F_NODAD
		if err := netlink.AddrAdd(l, a); err != nil {
			return fmt.Errorf("add %s to %s in %s: %w", cidr, dev, n.Name, err)
		}
		return nil
	})
}

// LinkIndex returns the ifindex of dev in n.
func (n *NS) LinkIndex(dev string) (int, error) {
	var idx int
	err := n.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("find %s in %s: %w", dev, n.Name, err)
		}
		idx = l.Attrs().Index
		return nil
	})
	return idx, err
}

// HardwareAddr returns dev's MAC address in n.
func (n *NS) HardwareAddr(dev string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := n.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("find %s in %s: %w", dev, n.Name, err)
		}
		mac = l.Attrs().HardwareAddr
		return nil
	})
	return mac, err
}

// CleanupStale deletes namespaces named Prefix*-PID whose PID is not alive:
// leftovers of a crashed or killed run. It returns the names removed.
func CleanupStale() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, Prefix) {
			continue
		}
		if !ownerGone(name[strings.LastIndexByte(name, '-')+1:]) {
			continue
		}
		if err := deleteNamed(name); err != nil {
			errs = append(errs, fmt.Errorf("delete stale %s: %w", filepath.Join(netnsDir, name), err))
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// Alive reports whether process pid exists. EPERM means it does (owned by
// another user): only ESRCH says it is gone, so a leftover is never taken
// for a live run's state by a caller with fewer privileges, nor the reverse.
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ownerGone reports whether s, the pid that ends a leftover's name, is a
// process other than this one that no longer exists. Anything not a pid
// is not ours to remove.
func ownerGone(s string) bool {
	pid, err := strconv.Atoi(s)
	return err == nil && pid > 0 && pid != os.Getpid() && !Alive(pid)
}

// StaleDirs returns the entries of dir named prefix+PID whose PID names a
// process that is gone: the leftovers of a killed run (pin roots, temporary
// directories). Other names are never returned.
func StaleDirs(dir, prefix string) []string {
	entries, _ := os.ReadDir(dir)
	var stale []string
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), prefix); ok && ownerGone(rest) {
			stale = append(stale, filepath.Join(dir, e.Name()))
		}
	}
	return stale
}
