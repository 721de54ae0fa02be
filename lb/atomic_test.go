package lb

import (
	"testing"

	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
)

// TestCountersAtomic (issue 25, finding 6): the programs that count add to
// their per-CPU counters with atomic instructions. Since 5.7 cgroup
// programs run with migration disabled but preemptible, so two tasks on
// one CPU can interleave a load-add-store and lose a count; an atomic add
// cannot. A lost count needs a preemption inside a few instructions, too
// rare to provoke with sockets, so this reads the instructions: before,
// the counting programs held no atomic instruction at all.
func TestCountersAtomic(t *testing.T) {
	spec, err := bpf.LoadLb()
	require.NoError(t, err)
	for _, name := range []string{bpf.LbProgLbConnect4, bpf.LbProgLbConnect6, bpf.LbProgLbSendmsg4, bpf.LbProgLbSendmsg6, bpf.LbProgLbSockRelease} {
		p := spec.Programs[name]
		atomics, plain := 0, 0
		for _, ins := range p.Instructions {
			op := ins.OpCode
			if op.Class() == asm.StXClass && op.Mode() == asm.AtomicMode {
				atomics++
			}
			if op.Class() == asm.StXClass && op.Mode() == asm.MemMode && op.Size() == asm.DWord {
				plain++
			}
		}
		assert.False(t, atomics == 0, "%s: no atomic instruction (%d plain 8-byte stores): its counts are a load-add-store", name, plain)
	}
}
