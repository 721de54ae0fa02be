package shield

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/pinfs"
)

// DefaultPinRoot is where the service pins, one directory per interface.
const DefaultPinRoot = "/sys/fs/bpf/xdpshield"

// bpffsMount is where bpffs is mounted when nothing is.
const bpffsMount = "/sys/fs/bpf"

// linkPin names the pinned bpf_link inside an interface's pin directory.
const linkPin = "link"

// Mode is how the program is attached to the interface.
type Mode uint8

const (
	// ModeAuto tries native (driver) XDP and falls back to generic.
	ModeAuto Mode = iota
	// ModeNative is driver XDP: the fast path, where the driver supports it.
	ModeNative
	// ModeGeneric is SKB-mode XDP: every driver, after the skb is built.
	ModeGeneric
)

var modeNames = [...]string{"auto", "native", "generic"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", m)
}

// ParseMode returns the mode named s: auto, native or generic.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown mode %q (want auto, native or generic)", s)
}

// ErrLocked is returned by Attach and Detach when another process holds the
// interface's lock (a running `shield serve`).
var ErrLocked = errors.New("interface is locked by another shield process")

// AttachOptions configure Attach.
type AttachOptions struct {
	// Iface is the interface to protect, in the caller's network namespace.
	Iface string
	// Mode selects native or generic XDP (default ModeAuto).
	Mode Mode
	// PinRoot holds one pin directory per interface (default DefaultPinRoot).
	// It must be on a bpf filesystem; under /sys/fs/bpf one is mounted when
	// none is.
	PinRoot string
	// Load configures the program; its PinPath is set by Attach.
	Load Options
	// AdoptUnverified adopts pins that cannot be shown to be this
	// namespace's, on a kernel without namespace cookies (claimPins).
	AdoptUnverified bool
}

// Attachment is the shield attached to one interface through a pinned
// bpf_link, with the interface's lock held. Closing it releases the lock and
// this process's handles; the link and maps stay pinned and the program stays
// attached.
type Attachment struct {
	Shield  *Shield
	Iface   string
	Ifindex int
	PinDir  string
	// Mode is the mode the program is attached in (never ModeAuto).
	Mode Mode
	// Adopted says a pinned link was found and the program was replaced
	// through it; OldProgram is the program it ran until then.
	Adopted    bool
	OldProgram ebpf.ProgramID
	Program    ebpf.ProgramID
	LinkID     link.ID
	// Notes are things the caller should log (fallbacks, kept settings).
	Notes []string

	link     link.Link
	lock     *os.File
	detached bool
}

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

// ownedPins are the names Attach pins in a pin directory: the link, every
// map of the program that is pinned by name, and those of older versions
// (the lists' own tries and change journal, oldlists.go). Detach removes these and only
// these.
func ownedPins() (map[string]bool, error) {
	spec, err := bpf.LoadShield()
	if err != nil {
		return nil, fmt.Errorf("load spec: %w", err)
	}
	names := map[string]bool{linkPin: true, journalPin: true, oldSourcesPin: true}
	for _, n := range oldListNames {
		names[n.name] = true
	}
	for name := range spec.Maps {
		if filepath.Ext(name) == "" {
			names[name] = true
		}
	}
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

// Attach loads the shield, pins its maps under PinRoot/Iface and attaches it
// to Iface through a pinned bpf_link. When a link is pinned there already,
// its maps are adopted (state intact) and the freshly loaded program replaces
// the old one through the link, atomically: no packet sees the interface
// without a program. A second Attach on the same interface fails with
// ErrLocked while the first Attachment is open.
func Attach(opts AttachOptions) (*Attachment, error) {
	if opts.Iface == "" || strings.ContainsAny(opts.Iface, "/\x00") || opts.Iface == "." || opts.Iface == ".." {
		return nil, fmt.Errorf("invalid interface name %q", opts.Iface)
	}
	if opts.Mode > ModeGeneric {
		return nil, fmt.Errorf("unknown mode %d", uint8(opts.Mode))
	}
	// Bad options change nothing: not even the pin directory is made.
	if err := opts.Load.validate(); err != nil {
		return nil, err
	}
	ifc, err := net.InterfaceByName(opts.Iface)
	if err != nil {
		return nil, fmt.Errorf("find interface %q: %w", opts.Iface, err)
	}
	dir, err := PinDir(opts.PinRoot, opts.Iface)
	if err != nil {
		return nil, err
	}
	root := opts.PinRoot
	if root == "" {
		root = DefaultPinRoot
	}
	// The root checked before anything is made in it: a root another
	// user made or may write is theirs to rearrange.
	if err := EnsureBPFFS(root); err != nil {
		return nil, err
	}
	if err := pinfs.CheckRoot(root); err != nil {
		return nil, err
	}
	notes, err := claimPins(root, opts.Iface, opts.AdoptUnverified)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", opts.Iface, err)
	}
	a := &Attachment{Iface: opts.Iface, Ifindex: ifc.Index, PinDir: dir, lock: lock, Notes: notes}
	// An empty directory means this Attach makes the pins: a failure
	// removes them again instead of leaving orphan maps behind.
	entries, err := os.ReadDir(dir)
	fresh := err == nil && len(entries) == 0
	ok := false
	defer func() {
		if ok {
			return
		}
		if fresh {
			if a.link != nil {
				a.link.Unpin()
			}
			removeOwned(dir)
			os.Remove(filepath.Dir(dir))
		}
		a.Close()
	}()

	opts.Load.PinPath = dir
	sh, err := Load(opts.Load)
	if err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("the maps pinned in %s belong to an incompatible version of the program, which stays attached; "+
				"`shield detach -iface %s` drops it and its state: %w", dir, opts.Iface, err)
		}
		return nil, err
	}
	a.Shield = sh
	if n := sh.ClockNote(); n != "" {
		a.Notes = append(a.Notes, n)
	}
	if r, ok := sh.Recovered(); ok {
		a.Notes = append(a.Notes, r.String())
	}
	if m, ok := sh.Migrated(); ok {
		a.Notes = append(a.Notes, m.String())
	}
	progInfo, err := sh.Program().Info()
	if err != nil {
		return nil, fmt.Errorf("program info: %w", err)
	}
	a.Program, _ = progInfo.ID()

	linkPath := filepath.Join(dir, linkPin)
	if l, err := link.LoadPinnedLink(linkPath, nil); err == nil {
		if err := a.adopt(l, opts.Mode); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load pinned link %s: %w", linkPath, err)
	}
	if a.link == nil {
		if err := a.attach(opts.Mode, linkPath); err != nil {
			return nil, err
		}
	}
	if info, err := a.link.Info(); err == nil {
		a.LinkID = info.ID
	}
	ok = true
	return a, nil
}

// adopt replaces the program of pinned link l, unless l no longer points at
// the interface (it was deleted and recreated): then l is unpinned and a
// fresh link is made by the caller.
func (a *Attachment) adopt(l link.Link, want Mode) error {
	info, err := l.Info()
	if err != nil {
		l.Close()
		return fmt.Errorf("pinned link info: %w", err)
	}
	xdp := info.XDP()
	if xdp != nil && xdp.Ifindex != 0 && int(xdp.Ifindex) != a.Ifindex {
		if other, err := net.InterfaceByIndex(int(xdp.Ifindex)); err == nil {
			l.Close()
			return fmt.Errorf("the link pinned for %s protects interface %s (index %d) of this namespace, renamed since? "+
				"`shield detach -iface %s` drops it", a.Iface, other.Name, other.Index, a.Iface)
		}
	}
	if xdp == nil || int(xdp.Ifindex) != a.Ifindex {
		a.Notes = append(a.Notes, fmt.Sprintf("pinned link was for another or a deleted interface (ifindex %v); attaching afresh", xdp))
		l.Unpin()
		l.Close()
		return nil
	}
	mode, err := attachedMode(a.Ifindex)
	if err != nil {
		l.Close()
		return err
	}
	if want != ModeAuto && want != mode {
		l.Close()
		return fmt.Errorf("the pinned link is attached in %s mode, %s was asked: run `shield detach -iface %s` first", mode, want, a.Iface)
	}
	a.OldProgram = info.Program
	if err := l.Update(a.Shield.Program()); err != nil {
		l.Close()
		return fmt.Errorf("replace the program through the pinned link: %w", err)
	}
	a.link, a.Mode, a.Adopted = l, mode, true
	return nil
}

func (a *Attachment) attach(mode Mode, linkPath string) error {
	xo := link.XDPOptions{Program: a.Shield.Program(), Interface: a.Ifindex}
	var l link.Link
	var err error
	switch mode {
	case ModeNative:
		xo.Flags = link.XDPDriverMode
		l, err = link.AttachXDP(xo)
	case ModeGeneric:
		xo.Flags = link.XDPGenericMode
		l, err = link.AttachXDP(xo)
	default:
		xo.Flags = link.XDPDriverMode
		if l, err = link.AttachXDP(xo); err != nil {
			a.Notes = append(a.Notes, fmt.Sprintf("native XDP refused (%v); using generic mode", err))
			xo.Flags = link.XDPGenericMode
			l, err = link.AttachXDP(xo)
		}
	}
	if err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("attach xdp to %q: %s: %w", a.Iface, foreignProgram(a.Iface, a.Ifindex), err)
		}
		return fmt.Errorf("attach xdp to %q: %w", a.Iface, err)
	}
	if err := l.Pin(linkPath); err != nil {
		l.Close() // the only reference: detaches
		return fmt.Errorf("pin link: %w", err)
	}
	a.link = l
	if a.Mode, err = attachedMode(a.Ifindex); err != nil {
		return err
	}
	return nil
}

// Close releases this process's handles and the lock. The pinned link keeps
// the program attached and the pinned maps keep the state.
func (a *Attachment) Close() error {
	var errs []error
	if a.link != nil {
		errs = append(errs, a.link.Close())
	}
	if a.Shield != nil {
		errs = append(errs, a.Shield.Close())
	}
	if a.lock != nil {
		errs = append(errs, a.lock.Close())
	}
	return errors.Join(errs...)
}

// Reattach attaches the program to the interface again after it was
// deleted and re-created under the same name (ifindex is the new index):
// a new link, pinned in place of the defunct one, with the same program
// and maps. Call it in the Attachment's network namespace.
func (a *Attachment) Reattach(ifindex int) error {
	linkPath := filepath.Join(a.PinDir, linkPin)
	if a.link != nil {
		a.link.Unpin()
		a.link.Close()
		a.link = nil
	}
	a.Ifindex, a.detached = ifindex, false
	if err := a.attach(a.Mode, linkPath); err != nil {
		return err
	}
	if info, err := a.link.Info(); err == nil {
		a.LinkID = info.ID
	}
	return nil
}

// LinkDefunct reports whether the link lost its interface: the device it
// was attached to is gone (the kernel reports ifindex 0), though an
// interface of the same name, even of the same index, may be there now
// (issue 23, finding 7).
func (a *Attachment) LinkDefunct() bool {
	if a.link == nil || a.detached {
		return false
	}
	info, err := a.link.Info()
	return err == nil && info.XDP() != nil && info.XDP().Ifindex == 0
}

// Detach takes the program off the interface now and removes the link's
// pin; the maps stay pinned. The Attachment must still be closed.
func (a *Attachment) Detach() error {
	if a.link == nil || a.detached {
		return nil
	}
	a.detached = true
	if err := a.link.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("detach link: %w", err)
	}
	if err := a.link.Unpin(); err != nil {
		return fmt.Errorf("unpin link: %w", err)
	}
	return nil
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

// EnsureBPFFS makes sure dir (created if missing) lives on a bpf filesystem,
// mounting one on /sys/fs/bpf when dir is below it and nothing is mounted
// there: the only change the service makes outside its pin directory.
func EnsureBPFFS(dir string) error {
	// The nearest existing ancestor tells which filesystem dir would be on.
	p := filepath.Clean(dir)
	for {
		if _, err := os.Stat(p); err == nil {
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	ok, err := pinfs.OnBPFFS(p)
	if err != nil {
		return err
	}
	if !ok {
		clean := filepath.Clean(dir)
		if clean != bpffsMount && !strings.HasPrefix(clean, bpffsMount+"/") {
			return fmt.Errorf("%s is not on a bpf filesystem", dir)
		}
		// A bpffs mounted in a private mount namespace (`ip netns exec`
		// makes one) dies with it, and the pinned link with it: the
		// program would be detached when the service stops.
		private, err := privateMountNS(mountNS, os.Getppid())
		if err != nil {
			return fmt.Errorf("no bpffs on %s, and no telling whether this mount namespace is private (ip netns exec?), "+
				"where a bpffs mounted now would vanish with the service, detaching the program: %w; "+
				"mount a bpffs on %s first or give a pin root on one", bpffsMount, err, bpffsMount)
		}
		if private {
			return fmt.Errorf("no bpffs on %s in this private mount namespace (ip netns exec?): pins made here would vanish, "+
				"detaching the program, when the service exits; enter only the network namespace "+
				"(nsenter --net=/run/netns/NAME keeps the host's mounts) or give a pin root on a bpffs that outlives the service", bpffsMount)
		}
		if err := unix.Mount("bpf", bpffsMount, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs on %s: %w", bpffsMount, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

// privateMountNS reports whether this process runs in a mount namespace
// other than init's or its parent's: one made for it, that dies with it.
// Init's is the reference: when it (or this process's own) cannot be read
// the answer is an error, never "not private" (a detached service under
// `ip netns exec` whose reference could not be read mounted bpffs in the
// throwaway namespace and lost its pins). A parent gone is no answer.
func privateMountNS(read func(pid string) (string, error), ppid int) (bool, error) {
	self, err := read("self")
	if err != nil {
		return false, fmt.Errorf("read this process's mount namespace: %w", err)
	}
	ref, err := read("1")
	if err != nil {
		return false, fmt.Errorf("read init's mount namespace, the reference: %w", err)
	}
	if ref != self {
		return true, nil
	}
	if ppid > 1 {
		if ns, err := read(strconv.Itoa(ppid)); err == nil && ns != self {
			return true, nil
		}
	}
	return false, nil
}

// mountNS names the mount namespace of pid ("self" or a number).
func mountNS(pid string) (string, error) {
	s, err := os.Readlink("/proc/" + pid + "/ns/mnt")
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", fmt.Errorf("/proc/%s/ns/mnt: empty link", pid)
	}
	return s, nil
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

// attachedMode asks netlink how XDP is attached to ifindex.
func attachedMode(ifindex int) (Mode, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, fmt.Errorf("inspect interface %d: %w", ifindex, err)
	}
	x := l.Attrs().Xdp
	if x == nil || !x.Attached {
		return 0, fmt.Errorf("no XDP program attached to interface %d", ifindex)
	}
	switch x.AttachMode {
	case nl.XDP_ATTACHED_SKB:
		return ModeGeneric, nil
	case nl.XDP_ATTACHED_DRV, nl.XDP_ATTACHED_HW:
		return ModeNative, nil
	}
	return ModeAuto, nil
}
