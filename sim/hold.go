package sim

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/kernel"
)

// Before 6.1, BPF_PROG_TEST_RUN of an XDP program adds the program to the
// kernel's XDP dispatcher for the run and removes it afterwards
// (bpf_prog_change_xdp in net/bpf/test_run.c), and each change re-patches
// the dispatcher's text. On real hardware that costs microseconds; under
// TCG, where the VM matrix runs, patching kernel text flushes translated
// code: one Repeat:1 run took 860 µs on 5.10 against 61 µs with the
// program already registered (docs/measurements/2026-12-01-ci-steps.md).
// A program attached in driver mode stays registered while attached, and
// the dispatcher then only counts a reference. Hold keeps the program run
// last attached in driver mode to one end of a veth pair, left down, in a
// namespace of this process's own that no traffic reaches and that goes
// with the process. It is an optimisation only: on a newer kernel, or when
// the namespace or the attach cannot be had (no privilege), runs go on
// without it.
var holder struct {
	sync.Mutex
	tried bool
	link  link.Link
	prog  *ebpf.Program
	iface int
}

// holdWanted is whether this kernel registers XDP programs with the
// dispatcher per test run: measured on the matrix's kernels (5.10 did,
// 6.1 and later did not).
var holdWanted = sync.OnceValue(func() bool { return !kernel.AtLeast(6, 1) })

// Hold registers prog with the XDP dispatcher for the runs that follow,
// on kernels that would otherwise re-patch it per run (see holder); Run
// calls it, and a caller running prog itself (other RunOptions) calls it
// first.
func Hold(prog *ebpf.Program) {
	if !holdWanted() || prog.Type() != ebpf.XDP {
		return
	}
	holder.Lock()
	defer holder.Unlock()
	if holder.prog == prog {
		return
	}
	if !holder.tried {
		holder.tried = true
		idx, err := holdDevice()
		if err != nil {
			holdErr = err
			return
		}
		holder.iface = idx
	}
	if holder.iface == 0 {
		return
	}
	if holder.link != nil {
		if err := holder.link.Update(prog); err == nil {
			holder.prog = prog
			return
		}
		holder.link.Close()
		holder.link = nil
	}
	var err error
	holder.link, err = attachIn(func() (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: holder.iface, Flags: link.XDPDriverMode})
	})
	if err == nil {
		holder.prog = prog
	}
	holdErr = err
}

// holdErr is the last hold's failure, for TestHold's message.
var holdErr error

var holdNS netns.NsHandle = -1

// holdDevice creates the namespace and a veth pair in it (both ends down)
// and returns the index of one end.
func holdDevice() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		return 0, err
	}
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("sim: cannot return to the original netns: %v", err))
	}
	holdNS = ns
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	la := netlink.NewLinkAttrs()
	la.Name = "hold0"
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "hold1"}); err != nil {
		return 0, err
	}
	l, err := h.LinkByName("hold0")
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}

// attachIn runs attach on a thread inside the hold namespace (an XDP
// attach names the interface by index in the caller's namespace).
func attachIn(attach func() (link.Link, error)) (link.Link, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	if err := netns.Set(holdNS); err != nil {
		return nil, err
	}
	l, aerr := attach()
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("sim: cannot return to the original netns: %v", err))
	}
	return l, aerr
}
