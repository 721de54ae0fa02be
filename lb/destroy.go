package lb

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/bpf"
)

// DestroyMode is what becomes of the balanced sockets still talking to a
// backend when it is removed.
type DestroyMode string

const (
	// DestroySockets: socket iterators (iter/tcp, iter/udp) call
	// bpf_sock_destroy (6.5+) on every socket whose balancer state names a
	// removed backend: TCP sockets are aborted (ECONNABORTED), UDP ones
	// fail their next call; the application reconnects through the VIP.
	DestroySockets DestroyMode = "sock_destroy"
	// DestroyLeftOpen, the fallback: they are left open, talking to the
	// removed backend until they close, and counted.
	DestroyLeftOpen DestroyMode = "left_open"
)

// destroyOffEnv, set to anything, makes the probe fail as a kernel without
// the feature does, so tests exercise the fallback on a kernel that has it.
const destroyOffEnv = "SHIELD_LB_DESTROY_OFF"

type destroyer struct {
	objs bpf.LbDestroyObjects
}

// probeDestroy loads the iterator programs against this LB's socket state
// and runs each once with nothing to destroy: what removal does, so a
// kernel that refuses any step (iterator programs: EPERM on some builds;
// bpf_sock_destroy before 6.5; sk_storage from iterators before 5.11) is
// found here. Any failure is the fallback, with the reason.
func (l *LB) probeDestroy() (*destroyer, error) {
	if os.Getenv(destroyOffEnv) != "" {
		return nil, fmt.Errorf("%s is set", destroyOffEnv)
	}
	if l.stateMode != StateSocket {
		return nil, fmt.Errorf("needs state mode %s (the sockets' own state names their backend), have %s", StateSocket, l.stateMode)
	}
	spec, err := bpf.LoadLbDestroy()
	if err != nil {
		return nil, err
	}
	d := &destroyer{}
	err = spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{bpf.LbMapSockState: l.objs.SockState},
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load the socket iterators: %v", ve)
		}
		return nil, fmt.Errorf("load the socket iterators: %w", err)
	}
	if _, err := d.run(); err != nil {
		d.objs.Close()
		return nil, err
	}
	return d, nil
}

// run runs both iterators once (in the calling thread's network
// namespace) and returns how many sockets they destroyed.
func (d *destroyer) run() (uint64, error) {
	for _, p := range []*ebpf.Program{d.objs.LbDestroyTcp, d.objs.LbDestroyUdp} {
		it, err := link.AttachIter(link.IterOptions{Program: p})
		if err != nil {
			return 0, fmt.Errorf("attach socket iterator: %w", err)
		}
		rd, err := it.Open()
		if err != nil {
			it.Close()
			return 0, fmt.Errorf("open socket iterator: %w", err)
		}
		_, err = io.Copy(io.Discard, rd)
		rd.Close()
		it.Close()
		if err != nil {
			return 0, fmt.Errorf("run socket iterator: %w", err)
		}
	}
	var n uint64
	if err := d.objs.DestroyCounts.Lookup(uint32(0), &n); err != nil {
		return 0, err
	}
	return n, nil
}

// DestroyMode says what removal does to the removed backends' sockets
// here, and why when it is the fallback.
func (l *LB) DestroyMode() (DestroyMode, string) {
	if l.destroy != nil {
		return DestroySockets, ""
	}
	return DestroyLeftOpen, l.destroyWhy
}

// RemovedSockets are the balanced sockets found on backends when they
// were removed: destroyed, or left open (the fallback).
type RemovedSockets struct {
	Destroyed, LeftOpen uint64
}

// RemovedSockets returns the counts since Load.
func (l *LB) RemovedSockets() RemovedSockets {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.removed
}

// terminate ends (or counts as left open) the sockets of backends ids,
// just removed. Callers hold l.mu. It runs in the calling thread's network
// namespace: the balanced processes' (serve's own, in production).
func (l *LB) terminate(ids []uint32) {
	var open uint64
	for _, id := range ids {
		var n int64
		if err := l.objs.BeSockets.Lookup(id, &n); err == nil && n > 0 {
			open += uint64(n)
		}
	}
	if open == 0 {
		l.forget(ids)
		return
	}
	if l.destroy == nil {
		l.removed.LeftOpen += open
		l.forget(ids)
		return
	}
	for _, id := range ids {
		l.destroy.objs.DestroyTargets.Put(id, uint8(1))
	}
	before, _ := l.destroy.count()
	_, err := l.destroy.run()
	after, _ := l.destroy.count()
	for _, id := range ids {
		l.destroy.objs.DestroyTargets.Delete(id)
	}
	done := after - before
	if err != nil {
		done = 0
	}
	l.removed.Destroyed += done
	if open > done {
		l.removed.LeftOpen += open - done
	}
	l.forget(ids)
}

func (d *destroyer) count() (uint64, error) {
	var n uint64
	return n, d.objs.DestroyCounts.Lookup(uint32(0), &n)
}

func (l *LB) forget(ids []uint32) {
	for _, id := range ids {
		l.objs.BeSockets.Delete(id)
	}
}
