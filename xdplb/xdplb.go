package xdplb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/lb/maglev"
)

// ErrInvalid wraps Apply's refusal of a configuration Validate refuses:
// nothing was written.
var ErrInvalid = errors.New("invalid xdplb configuration")

// Balancer owns one loaded xdplb program and its maps.
type Balancer struct {
	mu   sync.Mutex
	objs bpf.XdplbObjects
	cfg  Config
	vips map[string]*vipState // by VIP.String()
	// ids holds the backend id of each (VIP, backend) pair: an id is a
	// membership, so a connection table entry names a backend of its own
	// VIP only, and gen tells a reused id from the one an entry learnt.
	ids  map[member]uint32
	gen  uint32 // last generation given to an id (the entries' gen)
	cpus int    // possible CPUs, for per-CPU values
}

// member is a backend of one VIP.
type member struct {
	vip  string
	addr netip.Addr
}

type vipState struct {
	id    uint32
	ring  uint32 // live ring, 0 or 1
	table []netip.Addr
}

// Load loads the program and its maps, empty: every packet passes until
// Apply gives it VIPs.
func Load() (*Balancer, error) {
	// Before 5.11 maps are charged to RLIMIT_MEMLOCK (after, to the cgroup).
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
	}
	spec, err := bpf.LoadXdplb()
	if err != nil {
		return nil, fmt.Errorf("load xdplb spec: %w", err)
	}
	b := &Balancer{vips: map[string]*vipState{}, ids: map[member]uint32{}}
	if b.cpus, err = ebpf.PossibleCPU(); err != nil {
		return nil, fmt.Errorf("possible cpus: %w", err)
	}
	if err := bpf.Load(spec, nil, &b.objs, nil); err != nil {
		return nil, fmt.Errorf("load xdplb: %w", err)
	}
	return b, nil
}

// Close releases the program and maps (an attachment or a shield's
// program array keeps the program alive on its own).
func (b *Balancer) Close() error { return b.objs.Close() }

// Program is the XDP program, to attach or to chain behind the shield.
func (b *Balancer) Program() *ebpf.Program { return b.objs.Xdplb }

// Attach attaches the balancer alone to the interface ifindex (native
// XDP), for a machine without the shield.
func (b *Balancer) Attach(ifindex int) (link.Link, error) {
	l, err := link.AttachXDP(link.XDPOptions{Program: b.objs.Xdplb, Interface: ifindex})
	if err != nil {
		return nil, fmt.Errorf("attach xdplb to ifindex %d: %w", ifindex, err)
	}
	return l, nil
}

// Chain puts the balancer into the shield's `next` program array, so the
// shield tail-calls it for every packet it passes.
func (b *Balancer) Chain(next *ebpf.Map) error {
	if err := next.Put(uint32(0), b.objs.Xdplb); err != nil {
		return fmt.Errorf("chain xdplb behind the shield: %w", err)
	}
	return nil
}

// Unchain empties the shield's `next` array: the shield passes alone.
func Unchain(next *ebpf.Map) error {
	if err := next.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unchain xdplb: %w", err)
	}
	return nil
}

// Config returns the configuration last applied.
func (b *Balancer) Config() Config {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cfg
}

// Table returns the live Maglev table of vip (by VIP.String()) as backend
// addresses, slot by slot; nil for an unknown VIP.
func (b *Balancer) Table(vip string) []netip.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v := b.vips[vip]; v != nil {
		return slices.Clone(v.table)
	}
	return nil
}

func addrWords(a netip.Addr) [4]uint32 {
	var w [4]uint32
	b := a.As16()
	if a.Is4() {
		v := a.As4()
		copy(b[:], v[:])
		clear(b[4:])
	}
	for i := range w {
		// The program compares raw bytes: keep memory order (little-endian
		// hosts, as bpf2go's bpfel target).
		w[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return w
}

func vipKey(v VIP) bpf.XdplbVipKey {
	k := bpf.XdplbVipKey{Addr: addrWords(v.Addr), Port: htons(v.Port), Proto: v.proto()}
	if v.Addr.Is6() {
		k.Flags = uint8(bpf.XdplbLbFlagLB_V6)
	}
	return k
}

func htons(p uint16) uint16 { return p<<8 | p>>8 }

func firstFree(used map[uint32]bool, max int) (uint32, bool) {
	for i := 0; i < max; i++ {
		if !used[uint32(i)] {
			return uint32(i), true
		}
	}
	return 0, false
}

// Apply validates cfg whole and then makes it the balancer's: the config
// entry and backends first, then each VIP's new table written into its
// idle ring and made live by one update of the VIP's entry, then VIPs and
// backends no longer configured removed. A refused configuration changes
// nothing. A drained backend keeps its established flows; a removed one
// loses them to the table's choice.
func (b *Balancer) Apply(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()

	// Ids: kept for what stays, the lowest free for what is new.
	// A new pair prefers an id no old pair holds: the old rings stay live
	// until each VIP's swap below, and must not meet a new backend there.
	ids := map[member]uint32{}
	fresh := map[member]bool{}
	used := map[uint32]bool{}
	old := map[uint32]bool{}
	for _, id := range b.ids {
		old[id] = true
	}
	for _, v := range cfg.VIPs {
		for _, be := range v.Backends {
			m := member{v.String(), be.Addr}
			if id, ok := b.ids[m]; ok {
				ids[m] = id
				used[id] = true
			}
		}
	}
	for _, v := range cfg.VIPs {
		for _, be := range v.Backends {
			m := member{v.String(), be.Addr}
			if _, ok := ids[m]; ok {
				continue
			}
			taken := map[uint32]bool{}
			for id := range old {
				taken[id] = true
			}
			for id := range used {
				taken[id] = true
			}
			id, ok := firstFree(taken, MaxBackends)
			if !ok {
				id, _ = firstFree(used, MaxBackends)
			}
			ids[m] = id
			used[id] = true
			fresh[m] = true
		}
	}
	vipIDs := map[string]uint32{}
	vused := map[uint32]bool{}
	for _, v := range cfg.VIPs {
		if s := b.vips[v.String()]; s != nil {
			vipIDs[v.String()] = s.id
			vused[s.id] = true
		}
	}
	for _, v := range cfg.VIPs {
		if _, ok := vipIDs[v.String()]; !ok {
			id, _ := firstFree(vused, MaxVIPs)
			vipIDs[v.String()] = id
			vused[id] = true
		}
	}

	var c bpf.XdplbLbConfig
	copy(c.NextHop[:], cfg.NextHop)
	c.Mtu = uint16(cfg.mtu())
	if cfg.Source4.IsValid() {
		c.Src4 = addrWords(cfg.Source4)[0]
	}
	if cfg.Source6.IsValid() {
		c.Src6 = addrWords(cfg.Source6)
	}
	if err := b.objs.Config.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("write xdplb config: %w", err)
	}
	for m, id := range ids {
		if !fresh[m] {
			continue
		}
		b.gen++
		be := bpf.XdplbBackend{Addr: addrWords(m.addr), Flags: uint32(bpf.XdplbLbFlagLB_PRESENT), Gen: b.gen}
		if m.addr.Is6() {
			be.Flags |= uint32(bpf.XdplbLbFlagLB_V6)
		}
		zero := make([]bpf.XdplbLbCount, b.cpus)
		if err := b.objs.BackendStats.Put(id, zero); err != nil {
			return fmt.Errorf("reset stats of backend %s: %w", m.addr, err)
		}
		if err := b.objs.Backends.Put(id, &be); err != nil {
			return fmt.Errorf("write backend %s: %w", m.addr, err)
		}
	}

	// VIPs no longer configured go first: the vips hash holds MaxVIPs,
	// so adding before removing failed half-way when the old and new sets
	// together passed it, and a new VIP may take a removed one's id and
	// rings, which must not be live while they are rewritten.
	for _, v := range b.cfg.VIPs {
		if _, ok := vipIDs[v.String()]; !ok {
			if err := b.objs.Vips.Delete(vipKey(v)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("remove vip %s: %w", v, err)
			}
		}
	}
	vips := map[string]*vipState{}
	for _, v := range cfg.VIPs {
		name := v.String()
		st := &vipState{id: vipIDs[name]}
		if old := b.vips[name]; old != nil {
			st.ring = 1 - old.ring
		}
		names := make([]string, len(v.Backends))
		weights := make([]uint32, len(v.Backends))
		for i, be := range v.Backends {
			names[i] = be.Addr.String()
			weights[i] = be.weight()
		}
		base := (st.id*2 + st.ring) * uint32(RingSize)
		keys := make([]uint32, RingSize)
		vals := make([]uint32, RingSize)
		st.table = make([]netip.Addr, RingSize)
		for slot, i := range maglev.Table(names, weights, RingSize) {
			keys[slot] = base + uint32(slot)
			vals[slot] = ids[member{name, v.Backends[i].Addr}]
			st.table[slot] = v.Backends[i].Addr
		}
		if err := putAll(b.objs.Rings, keys, vals); err != nil {
			return fmt.Errorf("write table of %s: %w", name, err)
		}
		if err := b.objs.Vips.Put(vipKey(v), &bpf.XdplbVip{Id: st.id, Ring: st.ring}); err != nil {
			return fmt.Errorf("swap in table of %s: %w", name, err)
		}
		vips[name] = st
	}
	for m, id := range b.ids {
		// An id given to a new pair in this Apply is not the old one's
		// to clear.
		if _, ok := ids[m]; !ok && !used[id] {
			if err := b.objs.Backends.Put(id, &bpf.XdplbBackend{}); err != nil {
				return fmt.Errorf("remove backend %s of %s: %w", m.addr, m.vip, err)
			}
		}
	}
	b.cfg, b.vips, b.ids = cfg, vips, ids
	return nil
}

// putAll writes keys/vals into an array map: one batch (5.6+), else one
// update per key.
func putAll(m *ebpf.Map, keys, vals []uint32) error {
	if _, err := m.BatchUpdate(keys, vals, nil); err == nil {
		return nil
	} else if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Put(keys[i], vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// LoadDecap loads xdplb_decap alone: the XDP program that strips the
// balancer's outer header on a backend whose kernel has no ipip or
// ip6_tunnel module, attached to the interface the balancer's frames
// arrive on.
func LoadDecap() (*ebpf.Program, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
	}
	spec, err := bpf.LoadXdplb()
	if err != nil {
		return nil, fmt.Errorf("load xdplb spec: %w", err)
	}
	var objs struct {
		Decap *ebpf.Program `ebpf:"xdplb_decap"`
	}
	if err := bpf.Load(spec, nil, &objs, nil); err != nil {
		return nil, fmt.Errorf("load xdplb_decap: %w", err)
	}
	return objs.Decap, nil
}
