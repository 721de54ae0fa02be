package lb

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/lb/cgroup2"
	"github.com/xdpshield/xdpshield/lb/health"
	"github.com/xdpshield/xdpshield/lb/lbconf"
	"github.com/xdpshield/xdpshield/lb/lbpin"
	"github.com/xdpshield/xdpshield/lb/sockdestroy"
)

// Options configure Load.
type Options struct {
	// ReverseSize is the capacity of the reverse-translation LRU, from 1 to
	// lbconf.MaxReverseSize. Zero is an error: the size is the caller's
	// decision (lbconf.DefaultReverseSize is the usual one).
	ReverseSize uint32
	// PinPath, when set, is a directory on a bpf filesystem where the maps
	// are pinned by name (pinned ones found there are reused, state and
	// all) and where Attach pins the links: see StartPinned.
	PinPath string
	// state, when set, is used instead of what the kernel offers (tests
	// run the fallback on kernels that have sk_storage).
	state StateMode
}

// LB is the loaded balancer: its programs, maps, and the services it holds.
type LB struct {
	objs      bpf.LbObjects
	tableSpec *ebpf.MapSpec
	tableSize uint32
	refusal   syscall.Errno
	stateMode StateMode
	pinPath   string
	// stale says the services were read back from pinned maps: the next
	// commit rewrites every table rather than trust what it read.
	stale bool

	// writeFault fails map writes of a change, for tests (see fault).
	writeFault func(what string) error

	linkMu sync.Mutex
	links  []link.Link

	mu       sync.Mutex // serialises changes; guards the fields below
	services map[lbconf.ServiceKey]*service
	ids      [lbconf.MaxServices + 1]bool // service ids in use
	nextBE   uint32                       // next backend id

	health    *health.Prober
	healthErr error // the last change the prober could not write

	destroy    *sockdestroy.Destroyer // nil: removed backends' sockets are left open
	destroyWhy string                 // why destroy is nil
	removed    RemovedSockets
}

// Load loads the programs and maps; nothing is attached.
func Load(opts Options) (*LB, error) {
	if opts.ReverseSize == 0 || opts.ReverseSize > lbconf.MaxReverseSize {
		return nil, fmt.Errorf("reverse size %d out of range [1, %d]", opts.ReverseSize, lbconf.MaxReverseSize)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}
	spec, err := bpf.LoadLb()
	if err != nil {
		return nil, fmt.Errorf("load spec: %w", err)
	}
	mode := opts.state
	if mode == "" {
		mode = probeStateMode()
	}
	spec.Maps[bpf.LbMapReverse].MaxEntries = opts.ReverseSize
	if mode == StateSocket {
		// The fallback's LRU is not used: one entry, not megabytes.
		spec.Maps[bpf.LbMapReverse].MaxEntries = 1
	}
	if err := spec.Variables[bpf.LbVarHaveSkStorage].Set(mode == StateSocket); err != nil {
		return nil, fmt.Errorf("set have_sk_storage: %w", err)
	}
	if opts.PinPath != "" {
		for _, n := range lbpin.Maps {
			spec.Maps[n].Pinning = ebpf.PinByName
		}
	}

	l := &LB{
		tableSpec: spec.Maps[bpf.LbMapTables].InnerMap.Copy(),
		services:  map[lbconf.ServiceKey]*service{},
		nextBE:    1,
		pinPath:   opts.PinPath,
		stateMode: mode,
	}
	l.tableSize = l.tableSpec.MaxEntries
	l.health = health.New(l.Services, l.setQuarantined)

	// bpf_set_retval (5.18) lets a refused connect() say ECONNREFUSED; the
	// verifier refuses the helper before, and then the hook's EPERM is the
	// answer. Try with it, fall back without.
	err = l.load(spec, true)
	var ve *ebpf.VerifierError
	if err != nil && errors.As(err, &ve) {
		err = l.load(spec, false)
	}
	if err != nil {
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load lb: %+v", ve)
		}
		return nil, fmt.Errorf("load lb: %w", err)
	}
	if l.destroy, err = l.probeDestroy(); err != nil {
		l.destroyWhy = err.Error()
	}
	return l, nil
}

func (l *LB) load(spec *ebpf.CollectionSpec, retval bool) error {
	spec = spec.Copy()
	if err := spec.Variables[bpf.LbVarHaveSetRetval].Set(retval); err != nil {
		return fmt.Errorf("set have_set_retval: %w", err)
	}
	if err := spec.LoadAndAssign(&l.objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: l.pinPath}}); err != nil {
		return err
	}
	l.refusal = syscall.EPERM
	if retval {
		l.refusal = syscall.ECONNREFUSED
	}
	return nil
}

// Refusal is the errno a connect() or sendmsg() to a service with no usable
// backend fails with: ECONNREFUSED on 5.18+, EPERM before.
func (l *LB) Refusal() syscall.Errno { return l.refusal }

// StateMode is where the balancer keeps what it knows of a socket: the
// backend it chose per service and the VIP to report back.
type StateMode string

const (
	// StateSocket: on the socket (BPF_MAP_TYPE_SK_STORAGE, where the kernel
	// lets cgroup sock_addr and cgroup/sock programs call
	// bpf_sk_storage_get): it goes when the socket goes, and no socket's
	// state evicts another's.
	StateSocket StateMode = "sk_storage"
	// StateLRU, the fallback: an LRU hash keyed by socket cookie, deleted
	// by cookie when the socket is released. When more sockets hold state
	// than it has room for, the least recently used one's is evicted: that
	// socket's getpeername and recvfrom then report its backend.
	StateLRU StateMode = "lru"
)

// probeStateMode asks the kernel whether cgroup sock_addr programs (the
// translation) and cgroup/sock programs (sock_release, which counts the
// state gone) may call bpf_sk_storage_get. Any answer but yes, a failed
// probe included, is the fallback: it works on every kernel the programs
// load on.
func probeStateMode() StateMode {
	for _, pt := range []ebpf.ProgramType{ebpf.CGroupSockAddr, ebpf.CGroupSock} {
		if features.HaveProgramHelper(pt, asm.FnSkStorageGet) != nil {
			return StateLRU
		}
	}
	return StateSocket
}

// StateMode says where per-socket state is kept on this kernel.
func (l *LB) StateMode() StateMode { return l.stateMode }

type attachPoint struct {
	prog *ebpf.Program
	typ  ebpf.AttachType
	pin  string // the link's pin name under a pin directory
}

// attachTypes pairs every program with its attach point and pin name
// (lbpin.Links, in the same order).
func (l *LB) attachTypes() []attachPoint {
	p := &l.objs.LbPrograms
	progs := []*ebpf.Program{p.LbConnect4, p.LbConnect6, p.LbSendmsg4, p.LbSendmsg6, p.LbRecvmsg4, p.LbRecvmsg6,
		p.LbGetpeername4, p.LbGetpeername6, p.LbSockRelease}
	out := make([]attachPoint, len(lbpin.Links))
	for i, lk := range lbpin.Links {
		out[i] = attachPoint{progs[i], lk.Type, lk.Pin}
	}
	return out
}

// Attach attaches every program to the cgroup v2 directory dir (with
// BPF_F_ALLOW_MULTI, beside whatever else is attached there). Processes in
// dir and below it are balanced; nothing else is. All or nothing: on an
// error, what was attached is detached. Loaded with a PinPath, the links
// are pinned there: they stay attached when this process lets go of them.
func (l *LB) Attach(dir string) error {
	l.linkMu.Lock()
	defer l.linkMu.Unlock()
	if len(l.links) > 0 {
		return errors.New("attach: already attached")
	}
	if err := cgroup2.Check(dir); err != nil {
		return err
	}
	var links []link.Link
	for _, a := range l.attachTypes() {
		lk, err := link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: a.typ, Program: a.prog})
		if err == nil && l.pinPath != "" {
			if err = lk.Pin(filepath.Join(l.pinPath, a.pin)); err != nil {
				lk.Close()
			}
		}
		if err != nil {
			for _, x := range links {
				if l.pinPath != "" {
					x.Unpin()
				}
				x.Close()
			}
			return fmt.Errorf("attach %s to %q: %w", a.typ, dir, err)
		}
		links = append(links, lk)
	}
	l.links = links
	return nil
}

// Detach removes the programs from the cgroup (pinned links stay attached:
// lbpin.Remove removes them). Sockets already translated keep their backend;
// getpeername and recvfrom report it from then on.
func (l *LB) Detach() error {
	l.linkMu.Lock()
	defer l.linkMu.Unlock()
	var errs []error
	for _, lk := range l.links {
		errs = append(errs, lk.Close())
	}
	l.links = nil
	return errors.Join(errs...)
}

// Close detaches and releases the programs and maps.
func (l *LB) Close() error {
	var derr error
	if l.destroy != nil {
		derr = l.destroy.Close()
	}
	return errors.Join(l.Detach(), derr, l.objs.Close())
}

// ReverseSize is the capacity of the per-socket state LRU (StateLRU); 0
// with StateSocket, where each socket carries its own.
func (l *LB) ReverseSize() uint32 {
	if l.stateMode == StateSocket {
		return 0
	}
	return l.objs.Reverse.MaxEntries()
}

// TableSize is the number of slots in each service's choice table.
func (l *LB) TableSize() uint32 { return l.tableSize }
