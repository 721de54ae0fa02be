package lb

import (
	"fmt"
	"os"

	"github.com/xdpshield/xdpshield/lb/sockdestroy"
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

// probeDestroy loads the socket iterators (package sockdestroy) against
// this LB's socket state: any failure is the fallback, with the reason.
func (l *LB) probeDestroy() (*sockdestroy.Destroyer, error) {
	if os.Getenv(destroyOffEnv) != "" {
		return nil, fmt.Errorf("%s is set", destroyOffEnv)
	}
	if l.stateMode != StateSocket {
		return nil, fmt.Errorf("needs state mode %s (the sockets' own state names their backend), have %s", StateSocket, l.stateMode)
	}
	return sockdestroy.Load(l.objs.SockState)
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
	done, _ := l.destroy.Destroy(ids)
	l.removed.Destroyed += done
	if open > done {
		l.removed.LeftOpen += open - done
	}
	l.forget(ids)
}

func (l *LB) forget(ids []uint32) {
	for _, id := range ids {
		l.objs.BeSockets.Delete(id)
	}
}
