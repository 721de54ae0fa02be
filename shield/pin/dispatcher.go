package pin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/pinfs"
)

// The write side of libxdp's dispatcher protocol (protocol.org, version 2):
// the shield joins the dispatcher on an interface as one of its components,
// or starts one, and leaves it again, as libxdp adds and removes programs,
// so that xdp-loader, xdp-filter and other libxdp users run beside it.
//
// Every change builds a new dispatcher (bpf/dispatcher.c, libxdp's format)
// holding the components in run order, attaches each to its slot with an
// freplace link (a component may be attached to several dispatchers since
// 5.10), pins them under <bpffs>/xdp/dispatch-<ifindex>-<dispatcher id>/
// (prog<N>-prog, prog<N>-link), swaps the interface's program atomically
// (netlink, XDP_FLAGS_REPLACE with the old dispatcher expected) and unpins
// the old dispatcher: all under the exclusive flock of <bpffs>/xdp that
// libxdp takes for the same changes. A failure before the swap unpins what
// it made and leaves the interface as it was.

const (
	// DefaultRunPrio is the shield's run priority in a dispatcher: lower
	// runs first, and libxdp's default for a program is 50, so the shield
	// drops denied sources before the others see them.
	DefaultRunPrio = 10
	// The shield goes on to the next component on XDP_PASS only (bit 2);
	// bit 31 is the stub's own return, always set (protocol.org).
	shieldChainActions = 1 << 2
	dispatcherRetval   = 1 << 31
	libxdpDefaultPrio  = 50
)

// shieldProgNames are the names the shield's program has in a dispatcher:
// a component by one of them is the shield's and is replaced on Attach.
var shieldProgNames = []string{bpf.ShieldProgShield, bpf.ShieldProgShieldCompat}

// component is one program of a dispatcher being built.
type component struct {
	prog    *ebpf.Program // nil for the shield until it is loaded
	name    string
	prio    uint32
	actions uint32 // chain call actions, without the stub's bit
	flags   uint32 // program_flags (BPF_F_XDP_HAS_FRAGS)
	owned   bool   // prog was opened here and is closed with the dispatch
}

// ErrFreplace wraps the kernel's refusal of freplace of a dispatcher's slot.
var ErrFreplace = errors.New("the kernel refuses freplace (BPF_PROG_TYPE_EXT) of an XDP dispatcher's slot")

// ProbeDispatcher loads the dispatcher with one slot and attaches its
// xdp_pass program to the slot as an extension, through a link, as the
// shield joins a dispatcher: nil when this kernel allows it, else an error
// wrapping ErrFreplace and the errno (some kernels, or builds of them,
// refuse BPF_PROG_TYPE_EXT: EPERM as root).
func ProbeDispatcher() error {
	disp, err := loadDispatcher([]component{{prio: libxdpDefaultPrio, actions: shieldChainActions}})
	if err != nil {
		return err
	}
	defer disp.Close()
	spec, err := bpf.LoadDispatcher()
	if err != nil {
		return err
	}
	ps := spec.Programs[bpf.DispatcherProgXdpPass]
	ps.Type, ps.AttachType, ps.AttachTarget, ps.AttachTo = ebpf.Extension, 0, disp, "prog0"
	ext, err := ebpf.NewProgram(ps)
	if err != nil {
		return freplaceError(err)
	}
	defer ext.Close()
	l, err := link.AttachFreplace(disp, "prog0", ext)
	if err != nil {
		return freplaceError(err)
	}
	return l.Close()
}

func freplaceError(err error) error {
	var errno unix.Errno
	name := "no errno"
	if errors.As(err, &errno) {
		name = unix.ErrnoName(errno)
	}
	return fmt.Errorf("%w (%s): %w", ErrFreplace, name, err)
}

// loadDispatcher loads bpf/dispatcher.c configured for comps, in order.
// (The shield does not take multi-buffer frames: is_xdp_frags stays 0.)
func loadDispatcher(comps []component) (*ebpf.Program, error) {
	if len(comps) > libxdpMaxSlots {
		return nil, fmt.Errorf("a dispatcher has %d slots, %d programs asked", libxdpMaxSlots, len(comps))
	}
	spec, err := bpf.LoadDispatcher()
	if err != nil {
		return nil, err
	}
	conf := make([]byte, libxdpConfigV2)
	conf[0], conf[1], conf[2] = libxdpMagic, libxdpVersion, byte(len(comps))
	le := binary.LittleEndian
	for i, c := range comps {
		le.PutUint32(conf[4+4*i:], c.actions|dispatcherRetval)
		le.PutUint32(conf[4+4*libxdpMaxSlots+4*i:], c.prio)
		le.PutUint32(conf[4+8*libxdpMaxSlots+4*i:], c.flags)
	}
	rodata := spec.Maps[".rodata"]
	if rodata == nil || len(rodata.Contents) != 1 || len(rodata.Contents[0].Value.([]byte)) != libxdpConfigV2 {
		return nil, errors.New("bpf/dispatcher.c: no configuration of libxdp's layout in .rodata")
	}
	rodata.Contents[0].Value = conf
	var objs struct {
		Prog *ebpf.Program `ebpf:"xdp_dispatcher"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("load the dispatcher: %w", err)
	}
	return objs.Prog, nil
}

// lockLibxdp takes libxdp's lock: flock(LOCK_EX) of <bpffs>/xdp, made if
// missing.
func lockLibxdp() (*os.File, error) {
	dir := libxdpDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// dispatch is one change of an interface's dispatcher, under libxdp's lock.
type dispatch struct {
	ifindex int
	lock    *os.File
	old     *LibxdpDispatcher // nil: no program attached
	oldProg *ebpf.Program
	flags   uint32 // XDP_FLAGS_*: the old attachment's mode, or the asked one
	comps   []component
	slot    int            // the joining program's slot in comps, -1 when leaving
	prev    ebpf.ProgramID // the shield's program in the old dispatcher
	disp    *ebpf.Program
	links   []link.Link
	pinned  string // the new dispatcher's pin directory, once made
}

// beginDispatch takes libxdp's lock and reads the interface's dispatcher
// and its components (minus the shield's). It refuses an interface running
// another program, a dispatcher of another version, or one whose component
// pins it cannot read (it could not carry them over).
func beginDispatch(iface string, ifindex int, mode Mode) (*dispatch, error) {
	return beginDispatchOf(iface, ifindex, mode, shieldProgNames)
}

// beginDispatchOf is beginDispatch for the program by one of names: its
// component in the dispatcher is the one replaced or removed.
func beginDispatchOf(iface string, ifindex int, mode Mode, names []string) (*dispatch, error) {
	lock, err := lockLibxdp()
	if err != nil {
		return nil, err
	}
	d := &dispatch{ifindex: ifindex, lock: lock, slot: -1}
	ok := false
	defer func() {
		if !ok {
			d.close()
		}
	}()
	old, err := findDispatcher(ifindex) // the lock held: no LOCK_SH
	if err != nil {
		return nil, err
	}
	if old == nil {
		if id, err := attachedID(ifindex); err != nil {
			return nil, err
		} else if id != 0 {
			return nil, fmt.Errorf("dispatcher mode on %q: %s; the shield joins libxdp's dispatcher only", iface, foreignProgram(iface, ifindex))
		}
		switch mode {
		case ModeNative:
			d.flags = nl.XDP_FLAGS_DRV_MODE
		case ModeGeneric:
			d.flags = nl.XDP_FLAGS_SKB_MODE
		}
		ok = true
		return d, nil
	}
	if old.Version != libxdpVersion {
		return nil, fmt.Errorf("dispatcher mode on %q: %s; only version %d is joined (libxdp too refuses to replace an older one): unload its programs first",
			iface, old, libxdpVersion)
	}
	d.old = old
	if d.oldProg, err = ebpf.NewProgramFromID(old.Program); err != nil {
		return nil, fmt.Errorf("open the dispatcher %d: %w", old.Program, err)
	}
	m, err := attachedMode(ifindex)
	if err != nil {
		return nil, err
	}
	if mode != ModeAuto && mode != m {
		return nil, fmt.Errorf("dispatcher mode on %q: libxdp's dispatcher there is attached in %s mode, %s was asked", iface, m, mode)
	}
	d.flags = nl.XDP_FLAGS_SKB_MODE
	if m == ModeNative {
		d.flags = nl.XDP_FLAGS_DRV_MODE
	}
	dir := d.oldDir()
	for _, c := range old.Components {
		p, err := ebpf.LoadPinnedProgram(filepath.Join(dir, fmt.Sprintf("prog%d-prog", c.Slot)), nil)
		if err != nil {
			return nil, fmt.Errorf("dispatcher mode on %q: %s: cannot carry over its slot %d: %w", iface, old, c.Slot, err)
		}
		info, err := p.Info()
		var id ebpf.ProgramID
		if err == nil {
			id, _ = info.ID()
		}
		p.Close()
		if err != nil {
			return nil, fmt.Errorf("program of slot %d: %w", c.Slot, err)
		}
		if slices.Contains(names, info.Name) {
			d.prev = id
			continue
		}
		// A fresh handle, not the pinned one: pinning that again
		// would move libxdp's pin.
		fresh, err := ebpf.NewProgramFromID(id)
		if err != nil {
			return nil, fmt.Errorf("program of slot %d: %w", c.Slot, err)
		}
		d.comps = append(d.comps, component{prog: fresh, name: info.Name, prio: c.RunPrio,
			actions: c.ChainCallActions &^ dispatcherRetval, flags: c.Flags, owned: true})
	}
	ok = true
	return d, nil
}

func (d *dispatch) oldDir() string {
	return filepath.Join(libxdpDir(), fmt.Sprintf("dispatch-%d-%d", d.ifindex, d.old.Program))
}

// addShield places the shield at prio among the components, in libxdp's
// order (run priority, then name), and loads the new dispatcher. The
// shield's program is loaded next, as an extension of d.slotName().
func (d *dispatch) addShield(prio uint32) error {
	return d.add(bpf.ShieldProgShield, prio, shieldChainActions)
}

// add places the program name (loaded next, as an extension of
// d.slotName()) at prio with the chain call actions among the components.
func (d *dispatch) add(name string, prio, actions uint32) error {
	if len(d.comps) >= libxdpMaxSlots {
		return fmt.Errorf("libxdp's dispatcher runs %d programs already, its most", len(d.comps))
	}
	d.comps = append(d.comps, component{name: name, prio: prio, actions: actions})
	slices.SortStableFunc(d.comps, func(a, b component) int {
		if a.prio != b.prio {
			return int(int64(a.prio) - int64(b.prio))
		}
		return strings.Compare(a.name, b.name)
	})
	for i, c := range d.comps {
		if c.prog == nil {
			d.slot = i
		}
	}
	return d.build()
}

func (d *dispatch) slotName() string { return fmt.Sprintf("prog%d", d.slot) }

// build loads the dispatcher for d.comps (none: nothing to load).
func (d *dispatch) build() error {
	if len(d.comps) == 0 {
		return nil
	}
	var err error
	d.disp, err = loadDispatcher(d.comps)
	return err
}

// commit attaches the components to the new dispatcher (the shield's
// program, when joining, is shield), pins them, swaps the interface's
// program and unpins the old dispatcher. It returns the shield's link.
func (d *dispatch) commit(shield *ebpf.Program) (link.Link, error) {
	if shield != nil {
		d.comps[d.slot].prog = shield
	}
	dispFD := -1
	var newID ebpf.ProgramID
	if d.disp != nil {
		info, err := d.disp.Info()
		if err != nil {
			return nil, err
		}
		newID, _ = info.ID()
		dir := filepath.Join(libxdpDir(), fmt.Sprintf("dispatch-%d-%d", d.ifindex, newID))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
		d.pinned = dir
		for i, c := range d.comps {
			slot := fmt.Sprintf("prog%d", i)
			l, err := link.AttachFreplace(d.disp, slot, c.prog)
			if err != nil {
				return nil, fmt.Errorf("attach %s to the dispatcher's %s: %w", c.name, slot, freplaceError(err))
			}
			d.links = append(d.links, l)
			if err := c.prog.Pin(filepath.Join(dir, slot+"-prog")); err != nil {
				return nil, fmt.Errorf("pin %s: %w", c.name, err)
			}
			if err := l.Pin(filepath.Join(dir, slot+"-link")); err != nil {
				return nil, fmt.Errorf("pin %s's link: %w", c.name, err)
			}
		}
		dispFD = d.disp.FD()
	}
	if err := d.swap(dispFD); err != nil {
		return nil, err
	}
	// The new dispatcher is attached: the old one's pins go, and with
	// them its links.
	d.pinned = ""
	if d.old != nil {
		_ = removePins(d.oldDir())
	}
	if d.slot < 0 {
		return nil, nil
	}
	l := d.links[d.slot]
	d.links = slices.Delete(d.links, d.slot, d.slot+1)
	return l, nil
}

// swap replaces the interface's program with fd (-1: none) atomically:
// the old dispatcher expected in its place, or nothing when there was none.
func (d *dispatch) swap(fd int) error {
	try := func(flags uint32) error {
		req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
		msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
		msg.Index = int32(d.ifindex)
		req.AddData(msg)
		attr := nl.NewRtAttr(unix.IFLA_XDP|unix.NLA_F_NESTED, nil)
		attr.AddRtAttr(nl.IFLA_XDP_FD, nl.Uint32Attr(uint32(int32(fd))))
		if d.oldProg != nil {
			flags |= unix.XDP_FLAGS_REPLACE
			attr.AddRtAttr(unix.IFLA_XDP_EXPECTED_FD, nl.Uint32Attr(uint32(d.oldProg.FD())))
		} else {
			flags |= nl.XDP_FLAGS_UPDATE_IF_NOEXIST
		}
		attr.AddRtAttr(nl.IFLA_XDP_FLAGS, nl.Uint32Attr(flags))
		req.AddData(attr)
		_, err := req.Execute(unix.NETLINK_ROUTE, 0)
		return err
	}
	if d.flags != 0 {
		if err := try(d.flags); err != nil {
			return fmt.Errorf("attach the dispatcher to interface %d: %w", d.ifindex, err)
		}
		return nil
	}
	// A new dispatcher, mode auto: native, else generic.
	if err := try(nl.XDP_FLAGS_DRV_MODE); err != nil {
		if err2 := try(nl.XDP_FLAGS_SKB_MODE); err2 != nil {
			return fmt.Errorf("attach the dispatcher to interface %d: native: %v; generic: %w", d.ifindex, err, err2)
		}
	}
	return nil
}

// close undoes what was not committed and releases the lock.
func (d *dispatch) close() {
	if d.pinned != "" {
		_ = removePins(d.pinned)
	}
	for _, l := range d.links {
		l.Close()
	}
	for _, c := range d.comps {
		if c.owned {
			c.prog.Close()
		}
	}
	if d.disp != nil {
		d.disp.Close()
	}
	if d.oldProg != nil {
		d.oldProg.Close()
	}
	if d.lock != nil {
		d.lock.Close() // releases the flock
	}
}

// dispatcherPins are the pins of a dispatcher's directory: prog<N>-prog
// and prog<N>-link for each slot.
var dispatcherPins = func() map[string]bool {
	m := map[string]bool{}
	for i := range libxdpMaxSlots {
		m[fmt.Sprintf("prog%d-prog", i)] = true
		m[fmt.Sprintf("prog%d-link", i)] = true
	}
	return m
}()

// removePins removes a dispatcher's pin directory, its own pins then the
// directory, through pinfs.RemoveOwned (no symlink followed, anything
// else left there and named). A cleanup after the swap: its error is the
// caller's to drop, the new dispatcher being attached either way.
func removePins(dir string) error {
	return pinfs.RemoveOwned(dir, dispatcherPins, "libxdp's dispatcher")
}

// leaveDispatcher takes the shield out of the interface's dispatcher: a
// new one with the other components, or none when the shield was alone.
func leaveDispatcher(iface string, ifindex int) error {
	if d, err := FindLibxdpDispatcher(ifindex); err != nil || d == nil {
		return err
	}
	d, err := beginDispatch(iface, ifindex, ModeAuto)
	if err != nil {
		return err
	}
	defer d.close()
	if d.old == nil || d.prev == 0 {
		return nil // the shield is not in it (any more)
	}
	if err := d.build(); err != nil {
		return err
	}
	_, err = d.commit(nil)
	return err
}

// attachedID is the program attached to ifindex, 0 for none.
func attachedID(ifindex int) (ebpf.ProgramID, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, err
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return ebpf.ProgramID(x.ProgId), nil
	}
	return 0, nil
}
