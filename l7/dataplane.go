package l7

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
)

// DataPlane holds a loaded data plane (bpf/l7.c's programs and maps) for
// Attach to use again (Options.Reuse): loading verifies l7_parse anew,
// which in a VM under TCG costs about 10 s, a reuse milliseconds. Attach
// takes it when it was loaded with the load-time constants Attach wants
// (pass_redirect, relay; have_lookup is the kernel's) and resets it to the
// state a load leaves (every map emptied or zeroed), else it loads anew
// into it; FastPath.Close detaches the programs, empties the maps (the
// sockets leave the sockhashes, as when the maps close) and gives it back
// instead of closing it. One FastPath at a time uses it. The zero value
// is an empty DataPlane; Close unloads it.
type DataPlane struct {
	mu     sync.Mutex
	objs   bpf.L7Objects
	loaded bool // objs hold a loaded data plane
	busy   bool // a FastPath uses it
	// The load-time constants of objs.
	lookup, passRedirect, relay bool
}

// Close unloads d. A FastPath using it must be closed first.
func (d *DataPlane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy {
		return errors.New("l7: data plane in use")
	}
	if !d.loaded {
		return nil
	}
	d.loaded = false
	return d.objs.Close()
}

// take gives fp d's objects, reset, when they have fp's constants, else
// loads new ones into d.
func (d *DataPlane) take(fp *FastPath, log *slog.Logger) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy {
		return errors.New("l7: data plane in use by another fast path")
	}
	if d.loaded && (d.passRedirect != fp.PassRedirect || d.relay != fp.Relay) {
		d.loaded = false
		d.objs.Close()
	}
	if d.loaded {
		if err := resetObjs(&d.objs); err != nil {
			d.loaded = false
			d.objs.Close()
			return fmt.Errorf("reset l7: %w", err)
		}
	} else {
		objs, lookup, err := loadObjs(log, fp.PassRedirect, fp.Relay)
		if err != nil {
			return err
		}
		d.objs, d.lookup, d.passRedirect, d.relay, d.loaded = objs, lookup, fp.PassRedirect, fp.Relay, true
	}
	d.busy = true
	fp.objs, fp.Lookup, fp.reuse = d.objs, d.lookup, d
	return nil
}

// giveBack ends fp's use of d: the maps emptied for the next one (closed
// when they cannot be, or when drop).
func (d *DataPlane) giveBack(drop bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.busy = false
	var err error
	if !drop {
		if err = resetObjs(&d.objs); err == nil {
			return nil
		}
	}
	d.loaded = false
	return errors.Join(err, d.objs.Close())
}

// loadObjs loads bpf/l7.c with the constants given, the sockhash lookup
// from programs where the kernel allows it.
func loadObjs(log *slog.Logger, passRedirect, relay bool) (objs bpf.L7Objects, lookup bool, err error) {
	spec, err := bpf.LoadL7()
	if err != nil {
		return objs, false, fmt.Errorf("load l7 spec: %w", err)
	}
	for _, lookup = range []bool{true, false} {
		err = bpf.Load(spec, map[string]any{bpf.L7VarHaveLookup: b2u(lookup), bpf.L7VarPassRedirect: b2u(passRedirect),
			bpf.L7VarRelay: b2u(relay)}, &objs, nil)
		var ve *ebpf.VerifierError
		if err == nil {
			return objs, lookup, nil
		}
		if !lookup || !errors.As(err, &ve) {
			break
		}
		log.Debug("l7: sockhash lookup refused, redirecting blind", "error", err)
	}
	return objs, false, fmt.Errorf("load l7: %w", err)
}

// resetObjs puts objs' maps back as a load leaves them: hashes and
// sockhashes emptied, arrays zeroed. Its variables are all constants.
func resetObjs(objs *bpf.L7Objects) error {
	return bpf.Clear(&objs.L7Maps, &objs.L7Variables)
}
