package pin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/shield"
)

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
	Load shield.Options
	// AdoptUnverified adopts pins that cannot be shown to be this
	// namespace's, on a kernel without namespace cookies (claimPins).
	AdoptUnverified bool
	// Dispatcher runs the shield as one program of libxdp's multi-program
	// dispatcher (dispatcher.go) instead of alone: joining the one on the
	// interface, beside what xdp-loader or xdp-filter attached there, or
	// starting one. Mode is the dispatcher's when it starts one. Kernels
	// that refuse freplace of XDP make Attach fail with ErrFreplace.
	Dispatcher bool
	// RunPrio is the shield's run priority in the dispatcher (lower runs
	// first); zero means DefaultRunPrio.
	RunPrio uint32
}

// Attachment is the shield attached to one interface through a pinned
// bpf_link, with the interface's lock held. Closing it releases the lock and
// this process's handles; the link and maps stay pinned and the program stays
// attached.
type Attachment struct {
	Shield  *shield.Shield
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

	// Dispatcher says the shield runs in libxdp's dispatcher
	// (AttachOptions.Dispatcher); Slot is its slot there.
	Dispatcher bool
	Slot       int

	link     link.Link
	lock     *os.File
	detached bool
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
	if err := opts.Load.Validate(); err != nil {
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
	if err := pinfs.EnsureBPFFS(root); err != nil {
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

	linkPath := filepath.Join(dir, linkPin)
	var disp *dispatch
	if opts.Dispatcher {
		if disp, err = a.beginJoin(opts, linkPath); err != nil {
			return nil, err
		}
		defer disp.close()
		opts.Load.Extend, opts.Load.ExtendFunc = disp.disp, disp.slotName()
	}

	if !opts.Dispatcher {
		// The pinned program array `next` is an extension's there:
		// the shield alone could not load with it.
		if d, err := FindLibxdpDispatcher(a.Ifindex); err == nil && d != nil && d.runsShield() {
			return nil, fmt.Errorf("attach xdp to %q: %s", opts.Iface, foreignProgram(opts.Iface, a.Ifindex))
		}
	}
	opts.Load.PinPath = dir
	sh, err := shield.Load(opts.Load)
	if err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("the maps pinned in %s belong to an incompatible version of the program, which stays attached; "+
				"`shield detach -iface %s` drops it and its state: %w", dir, opts.Iface, err)
		}
		if opts.Dispatcher && !fresh {
			// Maps the shield pinned alone: its program array is an
			// XDP program's, which an extension cannot use (EINVAL).
			return nil, fmt.Errorf("dispatcher mode on %q: the maps pinned in %s may be the shield's run alone, whose program array an extension cannot use; "+
				"`shield detach -iface %s` drops them and their state: %w", opts.Iface, dir, opts.Iface, err)
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

	if disp != nil {
		l, err := disp.commit(sh.Program())
		if err != nil {
			return nil, fmt.Errorf("dispatcher mode on %q: %w", opts.Iface, err)
		}
		a.link, a.Dispatcher, a.Slot = l, true, disp.slot
		a.OldProgram, a.Adopted = disp.prev, disp.prev != 0
		if a.Mode, err = attachedMode(a.Ifindex); err != nil {
			return nil, err
		}
		if info, err := a.link.Info(); err == nil {
			a.LinkID = info.ID
		}
		ok = true
		return a, nil
	}
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

// beginJoin checks that the shield may join the interface's dispatcher
// and prepares the new one, with a slot for the shield at its priority.
func (a *Attachment) beginJoin(opts AttachOptions, linkPath string) (*dispatch, error) {
	if _, err := os.Stat(linkPath); err == nil {
		return nil, fmt.Errorf("dispatcher mode on %q: the shield runs there alone, through the link pinned at %s; "+
			"`shield detach -iface %s` first (its state goes with it) or keep the mode it has", opts.Iface, linkPath, opts.Iface)
	}
	if err := ProbeDispatcher(); err != nil {
		return nil, fmt.Errorf("dispatcher mode on %q: %w; the shield can only attach alone here (docs/operating.md, \"Sharing the interface\")", opts.Iface, err)
	}
	d, err := beginDispatch(opts.Iface, a.Ifindex, opts.Mode)
	if err != nil {
		return nil, err
	}
	prio := opts.RunPrio
	if prio == 0 {
		prio = DefaultRunPrio
	}
	if err := d.addShield(prio); err != nil {
		d.close()
		return nil, fmt.Errorf("dispatcher mode on %q: %w", opts.Iface, err)
	}
	return d, nil
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
	if a.Dispatcher {
		return fmt.Errorf("%s was re-created: the shield in dispatcher mode is not attached again by itself; restart it", a.Iface)
	}
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
// pin; the maps stay pinned. The Attachment must still be closed. In
// dispatcher mode it removes the shield's slot (a new dispatcher with the
// other programs, or none) and must run in the interface's namespace.
func (a *Attachment) Detach() error {
	if a.link == nil || a.detached {
		return nil
	}
	a.detached = true
	if a.Dispatcher {
		// Its slot goes: a new dispatcher without it, its pins with the old.
		return leaveDispatcher(a.Iface, a.Ifindex)
	}
	if err := a.link.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("detach link: %w", err)
	}
	if err := a.link.Unpin(); err != nil {
		return fmt.Errorf("unpin link: %w", err)
	}
	return nil
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
