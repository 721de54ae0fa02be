package broken

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestCoarseClockWithoutProbe loads an XDP program calling
// bpf_ktime_get_coarse_ns (5.11+) with no feature probe, and runs it once.
func TestCoarseClockWithoutProbe(t *testing.T) {
	testutil.Root(t)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("remove memlock rlimit: %v", err)
	}
	spec := &ebpf.ProgramSpec{
		Name:    "coarse_clock",
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.FnKtimeGetCoarseNs.Call(),
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load XDP program using bpf_ktime_get_coarse_ns: %+v", ve)
		}
		t.Fatalf("load XDP program using bpf_ktime_get_coarse_ns: %v", err)
	}
	defer prog.Close()
	ret, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	if ret != 2 {
		t.Fatalf("verdict = %d, want 2 (XDP_PASS)", ret)
	}
}
