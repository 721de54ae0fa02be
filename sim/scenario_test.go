package sim

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"xdpshield/internal/testutil"
	"xdpshield/shield"
)

// TestScenarioFailureWritesPcap: a scenario whose expectation is wrong
// reports the step, the verdict and the counter diff, stops there, and
// writes every frame it ran to a pcap that reads back (and that tcpdump
// reads, when installed).
func TestScenarioFailureWritesPcap(t *testing.T) {
	s := load(t, 4096, shield.Limits{Rate: 1, Burst: 1, AdmissionRate: 10, AdmissionBurst: 10})
	dir := t.TempDir()
	f := From("198.18.0.1", UDP, Double...).Bytes()
	res, err := Scenario{Name: "wrong/on purpose", Target: ShieldTarget(s), PcapDir: dir, Steps: []Step{
		{Name: "first", At: sec, Frame: f, Want: Pass, Delta: One(pass, shield.ReasonOK, shield.ProtoUDP)},
		{Name: "wrongly expected to pass", At: sec, Frame: f, Want: Pass, Delta: One(pass, shield.ReasonOK, shield.ProtoUDP)},
		{Name: "never run", At: sec, Frame: f, Want: Drop},
	}}.Exec()
	require.NoError(t, err)
	assert.Equal(t, 2, res.Steps, "Result.Steps")
	require.Len(t, res.Failures, 2, "Result.Failures")
	assert.Contains(t, res.Failures[0], "step 1 (wrongly expected to pass), send 1 of 1: Run() = XDP_DROP, want XDP_PASS")
	assert.Contains(t, res.Failures[1], "(-want +got):\n+drop/limit/udp 1\n-pass/ok/udp 1\n")
	assert.Equal(t, filepath.Join(dir, "wrong_on_purpose.pcap"), res.Pcap, "Result.Pcap")

	got, err := ReadPcap(res.Pcap)
	require.NoError(t, err)
	require.Len(t, got, 2, "frames in the failure pcap")
	for i, p := range got {
		assert.Equal(t, f, p.Data, "frame %d", i)
		assert.Equal(t, sec, p.At, "frame %d time", i)
	}
	if tcpdump, err := exec.LookPath("tcpdump"); err == nil {
		out, err := exec.Command(tcpdump, "-nner", res.Pcap).CombinedOutput()
		require.NoError(t, err, "tcpdump:\n%s", out)
		assert.Contains(t, string(out), "vlan 200")
		assert.Contains(t, string(out), "198.18.0.1.40000 > 198.18.255.254.443")
	}
}

// TestScenarioRefusesToRunNothing: zero steps is an error, not a pass.
func TestScenarioRefusesToRunNothing(t *testing.T) {
	testutil.Root(t)
	_, err := Scenario{Name: "empty", Target: Target{Prog: dropProgram(t)}}.Exec()
	assert.ErrorContains(t, err, "has no steps")
}

// TestScenarioAnyProgram: the simulator runs a program that is not the
// shield (the XDP_DROP reference), without clock or counters.
func TestScenarioAnyProgram(t *testing.T) {
	testutil.Root(t)
	res := Scenario{Name: t.Name(), Target: Target{Prog: dropProgram(t)}, Steps: []Step{
		{Name: "ipv4", Frame: From("198.18.0.1", TCP).Bytes(), Want: Drop},
		{Name: "ipv6 double tagged", Frame: From("2001:db8::1", ICMP, Double...).Bytes(), Times: 3, Want: Drop},
	}}.Run(t)
	assert.Equal(t, 2, res.Steps)
	assert.Len(t, res.Sent, 4)

	_, err := Scenario{Name: "needs a clock", Target: Target{Prog: dropProgram(t)}, Steps: []Step{
		{At: sec, Frame: From("198.18.0.1", TCP).Bytes(), Want: Drop},
	}}.Exec()
	assert.ErrorContains(t, err, "has no virtual clock")
}

// TestRunRefusesBadSizes: frames the kernel's test runner would refuse are
// refused before the syscall, with ErrFrameSize.
func TestRunRefusesBadSizes(t *testing.T) {
	testutil.Root(t)
	prog := dropProgram(t)
	for _, n := range []int{0, 1, MinFrame - 1, MaxFrame + 1} {
		_, err := Run(prog, make([]byte, n))
		assert.ErrorIs(t, err, ErrFrameSize, "Run(%d bytes)", n)
	}
	for _, n := range []int{MinFrame, 1500, MaxFrame} {
		got, err := Run(prog, make([]byte, n))
		require.NoError(t, err, "Run(%d bytes)", n)
		assert.Equal(t, Drop, got, "Run(%d bytes)", n)
	}
}
