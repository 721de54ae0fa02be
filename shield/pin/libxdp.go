package pin

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The read side of libxdp's multi-program dispatcher protocol
// (xdp-project/xdp-tools, lib/libxdp/protocol.org, version 2, as Debian's
// xdp-tools 1.3.1 implements it): enough to recognise the dispatcher that
// xdp-loader and xdp-filter attach and to name what runs in it, so that
// Attach refuses an interface it cannot share with a message an operator
// can act on; in dispatcher mode the shield joins it (dispatcher.go).
const (
	libxdpDispatcherName = "xdp_dispatcher" // the dispatcher's function, its program name
	libxdpMagic          = 236              // 'X'+'D'+'P', config byte 0 since version 2
	libxdpVersion        = 2
	libxdpMaxSlots       = 10
	// The configuration (.rodata) of a version 2 dispatcher: magic,
	// version, num_progs_enabled, is_xdp_frags (one byte each), then
	// chain_call_actions, run_prios and program_flags (10 x u32 each).
	libxdpConfigV2 = 4 + 3*4*libxdpMaxSlots
	// Version 1: num_progs_enabled (u8, padded to 4), chain_call_actions
	// and run_prios.
	libxdpConfigV1 = 4 + 2*4*libxdpMaxSlots
)

// LibxdpDispatcher is libxdp's dispatcher found attached to an interface.
type LibxdpDispatcher struct {
	Program    ebpf.ProgramID
	Version    int
	Components []LibxdpComponent
}

// LibxdpComponent is one program run by the dispatcher, in run order.
type LibxdpComponent struct {
	Slot int
	// Name and Program come from the pin libxdp keeps of the component
	// (<bpffs>/xdp/dispatch-<ifindex>-<dispatcher id>/prog<slot>-prog);
	// empty when the pin could not be read.
	Name    string
	Program ebpf.ProgramID
	// RunPrio and ChainCallActions (a bit per XDP action that goes on to
	// the next component) as the dispatcher's configuration holds them.
	RunPrio          uint32
	ChainCallActions uint32
	// Flags are the program's load flags the dispatcher keeps
	// (program_flags, version 2: BPF_F_XDP_HAS_FRAGS).
	Flags uint32
}

func (d *LibxdpDispatcher) String() string {
	var parts []string
	for _, c := range d.Components {
		name := c.Name
		if name == "" {
			name = "(pin unreadable)"
		}
		parts = append(parts, fmt.Sprintf("%s priority %d", name, c.RunPrio))
	}
	return fmt.Sprintf("libxdp's dispatcher (program %d, protocol version %d) running %d program(s): %s",
		d.Program, d.Version, len(d.Components), strings.Join(parts, ", "))
}

// libxdpDir is where libxdp pins its dispatchers: the xdp directory of
// $LIBXDP_BPFFS, or of /sys/fs/bpf.
func libxdpDir() string {
	root := os.Getenv("LIBXDP_BPFFS")
	if root == "" {
		root = "/sys/fs/bpf"
	}
	return filepath.Join(root, "xdp")
}

// FindLibxdpDispatcher returns libxdp's dispatcher attached to ifindex in
// the calling thread's network namespace, or nil when no program is
// attached or the one attached is not libxdp's dispatcher. It checks what
// libxdp checks (protocol.org, "Reading list of existing programs from the
// kernel"): the program's name, its one configuration map (key 4 bytes, one
// entry, read-only for programs) and the magic byte and version in it.
func FindLibxdpDispatcher(ifindex int) (*LibxdpDispatcher, error) {
	d, err := findDispatcher(ifindex)
	if d != nil {
		d.componentPins(ifindex)
	}
	return d, err
}

// findDispatcher is FindLibxdpDispatcher without the components' names:
// it reads no pin, so it takes no lock (a caller may hold libxdp's).
func findDispatcher(ifindex int) (*LibxdpDispatcher, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("inspect interface %d: %w", ifindex, err)
	}
	x := l.Attrs().Xdp
	if x == nil || !x.Attached || x.ProgId == 0 {
		return nil, nil
	}
	id := ebpf.ProgramID(x.ProgId)
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, fmt.Errorf("open attached program %d: %w", id, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, fmt.Errorf("attached program %d info: %w", id, err)
	}
	if info.Name != libxdpDispatcherName {
		return nil, nil
	}
	maps, _ := info.MapIDs()
	if len(maps) != 1 {
		return nil, nil
	}
	m, err := ebpf.NewMapFromID(maps[0])
	if err != nil {
		return nil, fmt.Errorf("open dispatcher %d's configuration map: %w", id, err)
	}
	defer m.Close()
	mi, err := m.Info()
	if err != nil {
		return nil, fmt.Errorf("dispatcher %d's configuration map info: %w", id, err)
	}
	if mi.KeySize != 4 || mi.MaxEntries != 1 || mi.Flags&unix.BPF_F_RDONLY_PROG == 0 {
		return nil, nil
	}
	buf := make([]byte, mi.ValueSize)
	if err := m.Lookup(uint32(0), buf); err != nil {
		return nil, fmt.Errorf("read dispatcher %d's configuration: %w", id, err)
	}
	d, err := parseLibxdpConfig(buf)
	if err != nil {
		return nil, fmt.Errorf("dispatcher %d: %w", id, err)
	}
	d.Program = id
	return d, nil
}

// parseLibxdpConfig reads a dispatcher's configuration, version 2 (magic
// first) or 1 (no magic, libxdp before 1.2).
func parseLibxdpConfig(b []byte) (*LibxdpDispatcher, error) {
	le := binary.LittleEndian
	var n, actions, prios, flags int
	d := &LibxdpDispatcher{}
	switch {
	case len(b) >= 2 && b[0] == libxdpMagic:
		d.Version = int(b[1])
		if d.Version != libxdpVersion || len(b) != libxdpConfigV2 {
			return nil, fmt.Errorf("unknown dispatcher version %d (configuration of %d bytes)", d.Version, len(b))
		}
		n, actions, prios, flags = int(b[2]), 4, 4+4*libxdpMaxSlots, 4+8*libxdpMaxSlots
	case len(b) == libxdpConfigV1:
		d.Version = 1
		n, actions, prios = int(b[0]), 4, 4+4*libxdpMaxSlots
	default:
		return nil, fmt.Errorf("configuration of %d bytes matches no dispatcher version", len(b))
	}
	if n > libxdpMaxSlots {
		return nil, fmt.Errorf("%d programs enabled, at most %d slots", n, libxdpMaxSlots)
	}
	for i := 0; i < n; i++ {
		d.Components = append(d.Components, LibxdpComponent{
			Slot:             i,
			ChainCallActions: le.Uint32(b[actions+4*i:]),
			RunPrio:          le.Uint32(b[prios+4*i:]),
		})
		if flags != 0 {
			d.Components[i].Flags = le.Uint32(b[flags+4*i:])
		}
	}
	return d, nil
}

// componentPins names the components from libxdp's pins, read under the
// shared lock on the xdp directory (libxdp changes the pins under an
// exclusive one). Best effort: the pins live in one mount namespace's
// bpffs and may not be visible from here.
func (d *LibxdpDispatcher) componentPins(ifindex int) {
	dir := libxdpDir()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		return
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	sub := filepath.Join(dir, fmt.Sprintf("dispatch-%d-%d", ifindex, d.Program))
	for i := range d.Components {
		c := &d.Components[i]
		p, err := ebpf.LoadPinnedProgram(filepath.Join(sub, fmt.Sprintf("prog%d-prog", c.Slot)), nil)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil {
			c.Name = info.Name
			c.Program, _ = info.ID()
		}
		p.Close()
	}
}

// runsShield reports whether a component is the shield's program.
func (d *LibxdpDispatcher) runsShield() bool {
	return slices.ContainsFunc(d.Components, func(c LibxdpComponent) bool { return slices.Contains(shieldProgNames, c.Name) })
}

// foreignProgram describes the XDP program attached to ifindex that is not
// the shield's: libxdp's dispatcher with what runs in it, or the program's
// ID and name.
func foreignProgram(iface string, ifindex int) string {
	d, err := FindLibxdpDispatcher(ifindex)
	if err != nil {
		return fmt.Sprintf("another XDP program is attached (not by xdpshield?; %v)", err)
	}
	if d != nil {
		if d.runsShield() {
			return fmt.Sprintf("it runs %s: the shield runs there in dispatcher mode; attach in that mode, "+
				"or `shield detach -iface %s` first (docs/operating.md, \"Sharing the interface\")", d, iface)
		}
		return fmt.Sprintf("it runs %s, as xdp-loader and xdp-filter attach them; "+
			"the shield joins it only in dispatcher mode (docs/operating.md, \"Sharing the interface\"): "+
			"use that mode, unload them first (`xdp-loader unload -a %s`) or give the shield an interface of its own", d, iface)
	}
	l, err := netlink.LinkByIndex(ifindex)
	if err == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.ProgId != 0 {
		id := ebpf.ProgramID(l.Attrs().Xdp.ProgId)
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			defer p.Close()
			if info, err := p.Info(); err == nil {
				return fmt.Sprintf("another XDP program is attached (program %d %q, not by xdpshield?)", id, info.Name)
			}
		}
		return fmt.Sprintf("another XDP program is attached (program %d, not by xdpshield?)", id)
	}
	return "another XDP program is attached (not by xdpshield?)"
}
