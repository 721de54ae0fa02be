package l7

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/l7/policy"
)

// A policy change in the kernel. The data plane reads its policy from an
// array element (policies) and a ring array, which user space rewrites in
// place: a parser running during a write could read half of each. So the
// change goes through a state in which no parser reads anything but the
// policy's set_header word, which passes every framed request to the proxy
// (reason policy; the connection stays the kernel's, nothing goes sticky):
//
//  1. hold: the old policy with set_header = 1 (the one word that differs
//     from what is in force), then a grace period: no parser still reads
//     the old policy's routes, rules or ring.
//  2. the proxy swaps (Proxy.swap): everything passed up meets the new
//     policy whole.
//  3. install: pooled sockets of dropped backends leave the pool, each
//     connection's source mask is rewritten for the new rules, the ring and
//     then the new policy, still with set_header = 1, are written, a grace
//     period, and the new policy's own set_header is written (again one
//     word).
//
// A grace period is an RCU synchronisation: the kernel waits for every
// running BPF program before an update of a map-in-map returns (since 4.20,
// kernel/bpf/syscall.c maybe_wait_bpf_programs), and the SK_SKB parser and
// verdict run inside rcu_read_lock (net/core/skmsg.c). A request decided
// fast before the hold still goes to the backend it was decided for: its
// pooled socket leaves the pool but stays open, so its answer still comes
// back. It is not half-closed either: many backends take a client's EOF
// for the client leaving (Go's net/http cancels the request's context,
// nginx aborts a proxied request with 499).

// closeAfter bounds how long a pooled socket of a dropped backend stays
// open after it left the pool (unless its backend closes it first): the
// time a request sent to it just before the change has to be answered.
var closeAfter = 10 * time.Second

// barrier waits until no BPF program that was running when it was called
// runs any more.
func (fp *FastPath) barrier() error {
	if err := fp.grace.Put(uint32(0), fp.graceInner); err != nil {
		return fmt.Errorf("l7: wait for running programs: %w", err)
	}
	return nil
}

// newGrace makes the map-in-map whose updates are barriers.
func newGrace() (outer, inner *ebpf.Map, err error) {
	innerSpec := &ebpf.MapSpec{Name: "l7_grace_in", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	inner, err = ebpf.NewMap(innerSpec)
	if err != nil {
		return nil, nil, fmt.Errorf("l7: grace inner map: %w", err)
	}
	outer, err = ebpf.NewMap(&ebpf.MapSpec{Name: "l7_grace", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4,
		MaxEntries: 1, InnerMap: innerSpec})
	if err != nil {
		inner.Close()
		return nil, nil, fmt.Errorf("l7: grace map: %w", err)
	}
	return outer, inner, nil
}

// writePolicy writes kp as the kernel's policy and remembers it.
func (fp *FastPath) writePolicy(kp bpf.L7Policy) error {
	if err := fp.objs.Policies.Put(uint32(0), kp); err != nil {
		return fmt.Errorf("write l7 policy: %w", err)
	}
	fp.kp = kp
	return nil
}

// writeRing writes every route's ring of p.
func (fp *FastPath) writeRing(p *policy.Policy) error {
	for i, rt := range p.Routes() {
		for s := 0; s < policy.RingSlots; s++ {
			if err := fp.objs.Ring.Put(uint32(i*policy.RingSlots+s), uint32(rt.Ring[s])); err != nil {
				return fmt.Errorf("write l7 ring: %w", err)
			}
		}
	}
	return nil
}

// hold makes the kernel pass every request to the proxy and waits for the
// parsers that may still read the policy in force (step 1 above). The
// caller holds fp.polMu until install. When the wait fails the kernel is
// left passing every request to the proxy, and Enabled says so.
func (fp *FastPath) hold() error {
	kp := fp.kp
	kp.SetHeader = 1
	if err := fp.writePolicy(kp); err != nil {
		return err
	}
	if err := fp.barrier(); err != nil {
		fp.Enabled, fp.Why = false, fmt.Sprintf("a policy change could not wait for running programs (every request goes to the proxy): %v", err)
		return err
	}
	return nil
}

// install writes p into the kernel (step 3 above); old is the policy p
// replaces. On an error the kernel is left passing every request to the
// proxy, which enforces p.
func (fp *FastPath) install(old, p *policy.Policy) error {
	fp.dropPooled(p)
	fp.countRoutes(old, p)
	fp.mu.Lock()
	conns := make([]*clientConn, 0, len(fp.conns))
	for _, cc := range fp.conns {
		conns = append(conns, cc)
	}
	fp.mu.Unlock()
	var errs []error
	for _, cc := range conns {
		cc.mask.Store(p.SourceMask(cc.src))
		if err := fp.writeCtl(cc); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("ctl of %d: %w", cc.cookie, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := fp.writeRing(p); err != nil {
		return err
	}
	kp, why := kernelPolicy(p)
	final := kp
	kp.SetHeader = 1
	if err := fp.writePolicy(kp); err != nil {
		return err
	}
	if err := fp.barrier(); err != nil {
		return err
	}
	if err := fp.writePolicy(final); err != nil {
		return err
	}
	fp.Enabled, fp.Why = final.Enabled == 1, why
	return nil
}

// dropPooled takes the pooled sockets of backends p no longer uses out of
// the pool: no request is redirected to them any more, an answer on its
// way still reaches its client, and each is closed when its backend
// closes (or after closeAfter).
func (fp *FastPath) dropPooled(p *policy.Policy) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for _, cc := range fp.conns {
		cc.mu.Lock()
		for b, up := range cc.pooled {
			if p.Uses(b) {
				continue
			}
			fp.objs.Pool.Delete(bpf.L7PoolKey{Client: cc.cookie, Backend: uint32(b)})
			delete(cc.pooled, b)
			fp.dropped.Add(1)
			// A request the kernel redirected just before the hold may
			// still be on its way or being answered: no FIN, which the
			// backend could take for its client leaving, until closeAfter.
			time.AfterFunc(closeAfter, func() { up.Close() })
		}
		kept := cc.wanted[:0]
		for _, b := range cc.wanted {
			if p.Uses(b) {
				kept = append(kept, b)
			}
		}
		cc.wanted = kept
		cc.mu.Unlock()
	}
}

// countRoutes carries the kernel's fast counts of old's routes over to
// their names and takes the counts at which p's routes start: the kernel
// counts by route index, which a change renumbers.
func (fp *FastPath) countRoutes(old, p *policy.Policy) {
	fc, err := fp.Counters()
	if err != nil {
		fp.logf("read counters at a policy change: %v", err)
		return
	}
	base := map[string]uint64{}
	for i, rt := range old.Routes() {
		base[rt.Name] = fp.routeBase[rt.Name] + fc.Routes[i] - fp.routeOff[i]
	}
	fp.routeBase = map[string]uint64{}
	for i, rt := range p.Routes() {
		fp.routeBase[rt.Name] = base[rt.Name]
		fp.routeOff[i] = fc.Routes[i]
	}
}

// routeFast is the fast count of p's route i from the kernel's counts fc.
func (fp *FastPath) routeFast(p *policy.Policy, i int, fc FastCounters) uint64 {
	return fp.routeBase[p.Routes()[i].Name] + fc.Routes[i] - fp.routeOff[i]
}
