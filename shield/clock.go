package shield

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/tick"
)

// forceCompat makes Load use shield_compat whatever the kernel (tests).
var forceCompat bool

// haveCmpxchg probes whether the kernel accepts BPF_CMPXCHG (Linux 5.12) by
// loading a six-instruction XDP program that uses it on the stack.
var haveCmpxchg = sync.OnceValue(func() bool {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "probe_cmpxchg",
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
			asm.Mov.Imm(asm.R1, 1),
			asm.CmpXchg.Mem(asm.RFP, asm.R1, asm.DWord, -8),
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
	})
	if err != nil {
		return false
	}
	prog.Close()
	return true
})

// CheckLimits is the one check of limits for a clock, the same Load makes
// before anything is created: Validate, and on the jiffies clock a burst
// the clock's tick can refill (the tick measured through clock_probe,
// which needs CAP_BPF; when it cannot be measured, the coarsest tick Linux
// offers, HZ=100, so that a check never passes what Load refuses).
// `shield serve -check` and serve both go through it (issue 23, finding 9).
func CheckLimits(l config.Limits, c config.Clock) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if c != config.ClockJiffies {
		return nil
	}
	ns, err := tick.Jiffy()
	if err != nil {
		if terr := l.CheckTick(c, 1_000_000_000/100); terr != nil {
			return fmt.Errorf("%w (the tick could not be measured, %v: checked at HZ=100, the coarsest)", terr, err)
		}
		return nil
	}
	return l.CheckTick(c, ns)
}
