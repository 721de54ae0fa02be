package sim

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Action is an XDP program's return value.
type Action uint32

// The XDP actions of linux/bpf.h.
const (
	Aborted Action = iota
	Drop
	Pass
	TX
	Redirect
)

var actionNames = [...]string{"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("XDP_%d", uint32(a))
}

// ParseAction returns the action named s ("XDP_PASS" or "pass").
func ParseAction(s string) (Action, error) {
	for i, n := range actionNames {
		if s == n || "XDP_"+strings.ToUpper(s) == n {
			return Action(i), nil
		}
	}
	return 0, fmt.Errorf("unknown XDP action %q", s)
}

// MarshalText writes the action's name, for goldens.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads an action's name.
func (a *Action) UnmarshalText(b []byte) error {
	v, err := ParseAction(string(b))
	*a = v
	return err
}

// MinFrame and MaxFrame bound what BPF_PROG_TEST_RUN accepts for XDP: the
// kernel refuses (EINVAL) anything shorter than an Ethernet header, and a
// linear frame must fit a page less the XDP headroom and skb_shared_info.
const (
	MinFrame = 14
	MaxFrame = 3000
)

// ErrFrameSize is returned for frames the kernel's test runner refuses
// before the program sees them.
var ErrFrameSize = errors.New("frame size outside what BPF_PROG_TEST_RUN accepts")

// Run runs frame once through prog (Repeat 1, so stateful programs see it
// exactly once) and returns the program's action.
func Run(prog *ebpf.Program, frame []byte) (Action, error) {
	if len(frame) < MinFrame || len(frame) > MaxFrame {
		return 0, fmt.Errorf("run %d-byte frame: %w", len(frame), ErrFrameSize)
	}
	Hold(prog)
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Repeat: 1})
	if err != nil {
		return 0, fmt.Errorf("test run of %d-byte frame: %w", len(frame), err)
	}
	return Action(ret), nil
}

// DropProgram loads the reference program: XDP_DROP for every frame and
// nothing else, so a test run of it measures BPF_PROG_TEST_RUN's own cost
// per packet, and a scenario can drive a program that is not the shield.
func DropProgram() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xdp_drop_ref", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, int32(Drop)), asm.Return()},
	})
}
