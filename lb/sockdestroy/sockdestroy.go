package sockdestroy

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/bpf"
)

// Destroyer holds the socket iterators, loaded against a balancer's
// socket state.
type Destroyer struct {
	objs bpf.LbDestroyObjects
}

// Load loads the iterator programs against the balancer's socket state
// (sockState, the map bpf.LbMapSockState of a balancer in state mode
// sk_storage) and runs each once with nothing to destroy: what removal
// does, so a kernel that refuses any step (iterator programs: EPERM on
// some builds; bpf_sock_destroy before 6.5; sk_storage from iterators
// before 5.11) is found here, with the reason.
func Load(sockState *ebpf.Map) (*Destroyer, error) {
	spec, err := bpf.LoadLbDestroy()
	if err != nil {
		return nil, err
	}
	d := &Destroyer{}
	err = spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{bpf.LbMapSockState: sockState},
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
func (d *Destroyer) run() (uint64, error) {
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

// Destroy destroys the sockets whose state names one of the backends ids
// (in the calling thread's network namespace) and returns how many it
// destroyed; on an error, none are counted.
func (d *Destroyer) Destroy(ids []uint32) (uint64, error) {
	for _, id := range ids {
		d.objs.DestroyTargets.Put(id, uint8(1))
	}
	before, _ := d.count()
	_, err := d.run()
	after, _ := d.count()
	for _, id := range ids {
		d.objs.DestroyTargets.Delete(id)
	}
	if err != nil {
		return 0, err
	}
	return after - before, nil
}

func (d *Destroyer) count() (uint64, error) {
	var n uint64
	return n, d.objs.DestroyCounts.Lookup(uint32(0), &n)
}

// Close releases the iterator programs and their maps.
func (d *Destroyer) Close() error { return d.objs.Close() }
