package features

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
)

// Feature is one kernel feature the lab probes.
type Feature struct {
	Name  string // stable key: the gate's baseline records it
	What  string // what a test uses it for, for skip messages
	Since string // the upstream release that added it, for reading

	probe func() error
	once  sync.Once
	err   error
}

// Missing is a feature's probe failure: the feature, the errno (when the
// kernel gave one) and the whole error.
type Missing struct {
	Feature string
	Errno   unix.Errno // 0 when the failure carried none
	Err     error
}

// Error is one line: a verifier's log after the first line is left out.
func (m *Missing) Error() string {
	first, _, _ := strings.Cut(m.Err.Error(), "\n")
	return fmt.Sprintf("%s%s unavailable (%s): %s", Prefix, m.Feature, ErrnoName(m.Errno), strings.TrimSuffix(first, ":"))
}

func (m *Missing) Unwrap() error { return m.Err }

// ErrnoName is "EPERM" for EPERM, "no errno" for 0.
func ErrnoName(e unix.Errno) string {
	if e == 0 {
		return "no errno"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// Prefix starts the message of every skip for a missing feature: the gate
// counts the skips that carry it.
const Prefix = "kernel feature "

// Env names the features whose probes are made to fail (tests of the skip
// path): a comma-separated list of names, or "all".
const Env = "SHIELD_FEATURES_OFF"

// Check probes f once and returns nil or a *Missing.
func (f *Feature) Check() error {
	f.once.Do(func() {
		var err error
		if off(f.Name) {
			err = fmt.Errorf("%s=%s: %w", Env, os.Getenv(Env), unix.EPERM)
		} else {
			err = f.probe()
		}
		if err != nil {
			m := &Missing{Feature: f.Name, Err: err}
			errors.As(err, &m.Errno)
			f.err = m
		}
	})
	return f.err
}

func off(name string) bool {
	v := os.Getenv(Env)
	return v != "" && (v == "all" || slices.Contains(strings.Split(v, ","), name))
}

var (
	// MapIter: a map-element iterator program (iter/bpf_map_elem, 5.9+)
	// loaded and attached to a hash map: BenchmarkTop's in-kernel walk.
	MapIter = &Feature{Name: "map_elem_iter", What: "an iter/bpf_map_elem program", Since: "5.9", probe: probeMapIter}
	// ForEachMapElem: bpf_for_each_map_elem (5.13+) in a syscall program
	// (5.14+) run by BPF_PROG_TEST_RUN: BenchmarkTop's visit-only walk.
	ForEachMapElem = &Feature{Name: "for_each_map_elem", What: "bpf_for_each_map_elem in a syscall program", Since: "5.14", probe: probeForEach}
	// LiveFrames: BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES (5.18+):
	// the storms' fast generator (AF_PACKET is the fallback).
	LiveFrames = &Feature{Name: "xdp_live_frames", What: "BPF_F_TEST_XDP_LIVE_FRAMES", Since: "5.18", probe: probeLiveFrames}
	// Freplace: an extension program (BPF_PROG_TYPE_EXT, 5.6+) replacing
	// a slot of libxdp's dispatcher (bpf/dispatcher.c), re-attachable to
	// a second dispatcher (5.10+): the shield in dispatcher mode
	// (shield/pin). The product refuses that mode, naming the errno,
	// where it is missing; the tests skip.
	Freplace = &Feature{Name: "xdp_freplace", What: "freplace of an XDP dispatcher's slot", Since: "5.10", probe: probeFreplace}
)

// All are the probed features, in a fixed order.
func All() []*Feature { return []*Feature{MapIter, ForEachMapElem, LiveFrames, Freplace} }

// Present probes every feature: name to "" when present, else the errno's
// name (or "no errno").
func Present() map[string]string {
	out := map[string]string{}
	for _, f := range All() {
		out[f.Name] = ""
		var m *Missing
		if errors.As(f.Check(), &m) {
			out[f.Name] = ErrnoName(m.Errno)
		}
	}
	return out
}

// walkSpec is bpf/walk.c with a small sources table of its own.
func walkSpec() (*ebpf.CollectionSpec, error) {
	spec, err := bpf.LoadWalk()
	if err != nil {
		return nil, err
	}
	spec.Maps[bpf.WalkMapSources].MaxEntries = 16
	return spec, nil
}

func probeMapIter() error {
	spec, err := walkSpec()
	if err != nil {
		return err
	}
	var objs struct {
		Prog    *ebpf.Program `ebpf:"walk_iter"`
		Sources *ebpf.Map     `ebpf:"sources"`
	}
	if err := bpf.Load(spec, nil, &objs, nil); err != nil {
		return fmt.Errorf("load walk_iter: %w", err)
	}
	defer objs.Prog.Close()
	defer objs.Sources.Close()
	it, err := link.AttachIter(link.IterOptions{Program: objs.Prog, Map: objs.Sources})
	if err != nil {
		return fmt.Errorf("attach walk_iter: %w", err)
	}
	return it.Close()
}

func probeForEach() error {
	spec, err := walkSpec()
	if err != nil {
		return err
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"walk_visit"`
	}
	if err := bpf.Load(spec, nil, &objs, nil); err != nil {
		return fmt.Errorf("load walk_visit: %w", err)
	}
	defer objs.Prog.Close()
	if _, err := objs.Prog.Run(&ebpf.RunOptions{}); err != nil {
		return fmt.Errorf("run walk_visit: %w", err)
	}
	return nil
}

// probeLiveFrames runs an XDP_DROP program once in live-frames mode on the
// loopback of the caller's namespace: the frame is dropped, nothing is sent.
// The run names a batch size, which only live mode takes (5.18+): a kernel
// before it ignores the live flag of an XDP test run (5.10 runs the program
// once and sends nothing) but refuses the attribute it does not know
// (E2BIG), and a kernel that knows the attribute refuses a batch size
// without live mode (EINVAL).
func probeLiveFrames() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "live_probe", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1 /* XDP_DROP */), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("load an XDP program: %w", err)
	}
	defer prog.Close()
	frame := make([]byte, 64)
	frame[12], frame[13] = 0x88, 0xb5 // IEEE local experimental EtherType
	_, err = prog.Run(&ebpf.RunOptions{Data: frame, Repeat: 1, Flags: unix.BPF_F_TEST_XDP_LIVE_FRAMES, BatchSize: 1})
	if err != nil {
		return fmt.Errorf("test run with BPF_F_TEST_XDP_LIVE_FRAMES: %w", err)
	}
	return nil
}

// probeFreplace loads the dispatcher with one slot in use and attaches its
// xdp_pass program to that slot as an extension, through a link, as the shield
// joins a dispatcher (shield/pin.ProbeDispatcher does the same for the
// product).
func probeFreplace() error {
	spec, err := bpf.LoadDispatcher()
	if err != nil {
		return err
	}
	conf := spec.Maps[".rodata"].Contents[0].Value.([]byte)
	conf = append([]byte(nil), conf...)
	conf[0], conf[1], conf[2] = 236, 2, 1 // libxdp's magic, version 2, one slot
	conf[4], conf[7] = 1<<2, 1<<7         // slot 0 goes on after XDP_PASS and the stub's 31
	spec.Maps[".rodata"].Contents[0].Value = conf
	ext := spec.Programs[bpf.DispatcherProgXdpPass].Copy()
	var objs struct {
		Disp *ebpf.Program `ebpf:"xdp_dispatcher"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("load the dispatcher: %w", err)
	}
	defer objs.Disp.Close()
	ext.Type, ext.AttachType, ext.AttachTarget, ext.AttachTo = ebpf.Extension, 0, objs.Disp, "prog0"
	prog, err := ebpf.NewProgram(ext)
	if err != nil {
		return fmt.Errorf("load xdp_pass as an extension of the dispatcher's prog0: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachFreplace(objs.Disp, "prog0", prog)
	if err != nil {
		return fmt.Errorf("attach it: %w", err)
	}
	return l.Close()
}
