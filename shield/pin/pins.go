package pin

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/shield"
)

// DefaultPinRoot is where the service pins, one directory per interface.
const DefaultPinRoot = "/sys/fs/bpf/xdpshield"

// linkPin names the pinned bpf_link inside an interface's pin directory.
const linkPin = "link"

// PinDir is the pin directory of iface under root (DefaultPinRoot if empty)
// for the calling thread's network namespace: root/netns-INODE-cCOOKIE/IFACE
// (root/netns-INODE/IFACE where the kernel gives no namespace cookie).
// Keyed by namespace, a service in another namespace with an interface of
// the same name (every container's eth0) has pins of its own and never
// adopts or unpins a link that protects another namespace's interface.
func PinDir(root, iface string) (string, error) {
	if root == "" {
		root = DefaultPinRoot
	}
	id, err := currentNetns()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, id.key(), iface), nil
}

// netnsID names a network namespace: its nsfs inode, unique only among
// the namespaces alive (the kernel hands a freed one's number to the next
// at once), and its cookie, unique for the boot (SO_NETNS_COOKIE, 5.14+).
type netnsID struct {
	ino       uint64
	cookie    uint64
	hasCookie bool
}

// key is the namespace's directory name under a pin root.
func (n netnsID) key() string {
	if n.hasCookie {
		return fmt.Sprintf("netns-%d-c%d", n.ino, n.cookie)
	}
	return n.legacyKey()
}

// legacyKey is the name by inode alone: the layout before cookies, and
// the only one on kernels without them.
func (n netnsID) legacyKey() string { return fmt.Sprintf("netns-%d", n.ino) }

// envNoNetnsCookie makes the service behave as on a kernel without
// SO_NETNS_COOKIE (before 5.14): the tests of that path run on any kernel.
const envNoNetnsCookie = "SHIELD_TEST_NO_NETNS_COOKIE"

// currentNetns identifies the calling thread's network namespace.
func currentNetns() (netnsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return netnsID{}, fmt.Errorf("identify the network namespace: %w", err)
	}
	id := netnsID{ino: st.Ino}
	if os.Getenv(envNoNetnsCookie) == "1" {
		return id, nil
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netnsID{}, fmt.Errorf("identify the network namespace: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	switch {
	case err == nil:
		id.cookie, id.hasCookie = c, true
	case errors.Is(err, unix.ENOPROTOOPT):
	default:
		return netnsID{}, fmt.Errorf("netns cookie: %w", err)
	}
	return id, nil
}

// pinsVerified reports whether the pins in dir can be shown to be this
// namespace's without a cookie: its pinned link still holds a live
// interface of this namespace. A namespace's inode is unique among the
// living, so a live device seen here means the pins are ours; a link
// whose device died with its namespace (ifindex 0), or no link, shows
// nothing.
func pinsVerified(dir string) bool {
	l, err := link.LoadPinnedLink(filepath.Join(dir, linkPin), nil)
	if err != nil {
		return false
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil || info.XDP() == nil || info.XDP().Ifindex == 0 {
		return false
	}
	_, err = net.InterfaceByIndex(int(info.XDP().Ifindex))
	return err == nil
}

// claimPins decides whether Attach may adopt what is pinned for iface
// under root in this namespace (issue 23, finding 5: a fresh serve in a
// new namespace took a dead one's `allow 0.0.0.0/0` and `rate 5`, its
// inode reused). With a cookie the directory's name says it; pins of the
// layout by inode alone are moved under the cookie's name when they are
// shown to be this namespace's, and left alone otherwise. Without a cookie
// pins that cannot be shown to be ours are refused unless adoptUnverified.
func claimPins(root, iface string, adoptUnverified bool) (notes []string, err error) {
	id, err := currentNetns()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, id.key(), iface)
	legacy := filepath.Join(root, id.legacyKey())
	if id.hasCookie {
		if _, err := os.Lstat(filepath.Join(root, id.key())); err == nil {
			return nil, nil
		}
		if _, err := os.Lstat(legacy); err != nil {
			return nil, nil
		}
		if pinsVerified(filepath.Join(legacy, iface)) {
			if err := os.Rename(legacy, filepath.Join(root, id.key())); err != nil {
				return nil, fmt.Errorf("move the pins of this namespace under its cookie: %w", err)
			}
			return []string{fmt.Sprintf("pins moved from %s to %s (named by the namespace's cookie)", legacy, filepath.Join(root, id.key()))}, nil
		}
		return []string{fmt.Sprintf("pins in %s are of a namespace with this one's inode that is gone, or cannot be shown to be this one's: "+
			"not adopted; remove them with `rm -r %s` once no service uses them", legacy, legacy)}, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 || pinsVerified(dir) {
		return nil, nil
	}
	if adoptUnverified {
		return []string{fmt.Sprintf("adopting the pins in %s, which cannot be shown to be this namespace's (no netns cookie on this kernel; -adopt-pins)", dir)}, nil
	}
	return nil, fmt.Errorf("the pins in %s may be a namespace's that is gone, whose inode this one reuses, and this kernel gives no namespace "+
		"cookie to tell (SO_NETNS_COOKIE, 5.14+): nothing was attached; `shield serve -adopt-pins` adopts them, "+
		"`shield detach -iface %s` drops them", dir, iface)
}

// ownedPins are the names Attach pins in a pin directory: the link and
// every name Load pins (shield.PinNames). Detach removes these and only
// these.
func ownedPins() (map[string]bool, error) {
	names, err := shield.PinNames()
	if err != nil {
		return nil, err
	}
	names[linkPin] = true
	return names, nil
}

// removeOwned removes the shield's pins from dir, then dir when nothing
// else is left in it; entries that are not the shield's are left alone and
// named in the error.
func removeOwned(dir string) error {
	owned, err := ownedPins()
	if err != nil {
		return err
	}
	return pinfs.RemoveOwned(dir, owned, "shield")
}

// Detach removes the program from iface (in the caller's network namespace)
// and deletes its pins (link and maps) and pin directory, in that order. It
// refuses a pin root that is not on a bpf filesystem and removes only the
// names the shield pins, leaving anything else where it is. It takes the
// interface's lock, so it fails with ErrLocked while a service runs. iface
// need not exist any more. The companions' subdirectories (the balancer's
// lb/) are removed first, through their own Remove.
func Detach(pinRoot, iface string, companions ...Companion) error {
	if pinRoot == "" {
		pinRoot = DefaultPinRoot
	}
	dir, lock, err := lockPinned(pinRoot, iface)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := removeCompanions(dir, companions); err != nil {
		return err
	}

	linkPath := filepath.Join(dir, linkPin)
	if l, err := link.LoadPinnedLink(linkPath, nil); err == nil {
		// Detach first (5.9+): the link stops even if something else
		// still holds it open. Then drop the pin, the last reference.
		if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			l.Close()
			return fmt.Errorf("detach link: %w", err)
		}
		if err := l.Unpin(); err != nil {
			l.Close()
			return fmt.Errorf("unpin link: %w", err)
		}
		l.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("load pinned link %s: %w", linkPath, err)
	} else if ifc, err := net.InterfaceByName(iface); err == nil {
		// No link of its own: the shield may run in libxdp's dispatcher.
		if err := leaveDispatcher(iface, ifc.Index); err != nil {
			return fmt.Errorf("leave libxdp's dispatcher on %q: %w", iface, err)
		}
	}
	if err := removeOwned(dir); err != nil {
		return err
	}
	// The namespace's directory and the root, when this was the last.
	if os.Remove(filepath.Dir(dir)) == nil {
		os.Remove(pinRoot)
	}
	return nil
}

// Companion is a subdirectory of an interface's pin directory that another
// part of the service owns (the balancer's lb/): Detach removes it through
// Remove, under the interface's lock, before the shield's own pins.
type Companion struct {
	Name   string
	Remove func(dir string) error
}

// DetachCompanions removes only the companions' pins of iface (the shield
// stays attached), under the interface's lock: ErrLocked while a service
// runs. Same checks as Detach.
func DetachCompanions(pinRoot, iface string, companions ...Companion) error {
	dir, lock, err := lockPinned(pinRoot, iface)
	if err != nil {
		return err
	}
	defer lock.Close()
	return removeCompanions(dir, companions)
}

func removeCompanions(dir string, companions []Companion) error {
	for _, c := range companions {
		if c.Name == "" || strings.ContainsAny(c.Name, "/\x00") || c.Name == "." || c.Name == ".." {
			return fmt.Errorf("invalid companion name %q", c.Name)
		}
		p := filepath.Join(dir, c.Name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := c.Remove(p); err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return nil
}

// lockPinned checks pinRoot and iface, finds the pin directory and takes
// its lock.
func lockPinned(pinRoot, iface string) (string, *os.File, error) {
	if iface == "" || strings.ContainsAny(iface, "/\x00") || iface == "." || iface == ".." {
		return "", nil, fmt.Errorf("invalid interface name %q", iface)
	}
	if pinRoot == "" {
		pinRoot = DefaultPinRoot
	}
	if ok, err := pinfs.OnBPFFS(pinRoot); err != nil {
		return "", nil, err
	} else if !ok {
		return "", nil, fmt.Errorf("%s is not on a bpf filesystem: no shield pins there, nothing removed", pinRoot)
	}
	if err := pinfs.CheckRoot(pinRoot); err != nil {
		return "", nil, fmt.Errorf("%w (nothing removed)", err)
	}
	dir, err := PinDir(pinRoot, iface)
	if err != nil {
		return "", nil, err
	}
	// Pins of the layout before namespace cookies are this namespace's
	// to drop too: detach is asked for by name.
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if id, err := currentNetns(); err == nil && id.hasCookie {
			if legacy := filepath.Join(pinRoot, id.legacyKey(), iface); legacy != dir {
				if _, err := os.Lstat(legacy); err == nil {
					dir = legacy
				}
			}
		}
	}
	if _, err := os.Lstat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil, fmt.Errorf("nothing pinned for %q in this network namespace: %s does not exist", iface, dir)
		}
		return "", nil, fmt.Errorf("stat %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("lock %s: %w", iface, err)
	}
	return dir, lock, nil
}

// lockDir takes an exclusive, non-blocking flock on directory dir. bpffs
// holds no regular files, so the pin directory itself carries the lock; the
// kernel drops it when the holder exits, however it exits.
func lockDir(dir string) (*os.File, error) {
	f, err := pinfs.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if pid := lockHolder(dir); pid != "" {
				return nil, fmt.Errorf("%w (pid %s holds %s)", ErrLocked, pid, dir)
			}
			return nil, fmt.Errorf("%w (%s)", ErrLocked, dir)
		}
		return nil, fmt.Errorf("flock %s: %w", dir, err)
	}
	return f, nil
}

// lockHolder finds the pid holding a flock on dir in /proc/locks, or "".
func lockHolder(dir string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return ""
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return ""
	}
	defer f.Close()
	want := fmt.Sprintf(":%d", st.Ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF
		fs := strings.Fields(sc.Text())
		if len(fs) >= 6 && fs[1] == "FLOCK" && strings.HasSuffix(fs[5], want) &&
			fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev)) == fs[5][:len(fs[5])-len(want)] {
			return fs[4]
		}
	}
	return ""
}
