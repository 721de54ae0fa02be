package datapath

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/sim"
)

// TestScenarioFailureWritesPcap: a scenario whose expectation is wrong
// reports the step, the verdict and the counter diff, stops there, and
// writes every frame it ran to a pcap that reads back (and that tcpdump
// reads, when installed).
func TestScenarioFailureWritesPcap(t *testing.T) {
	s := load(t, 4096, config.Limits{Rate: 1, Burst: 1, AdmissionRate: 10, AdmissionBurst: 10})
	dir := t.TempDir()
	f := sim.From("198.18.0.1", sim.UDP, sim.Double...).Bytes()
	res, err := sim.Scenario{Name: "wrong/on purpose", Target: Target(s), PcapDir: dir, Steps: []sim.Step{
		{Name: "first", At: sec, Frame: f, Want: sim.Pass, Delta: One(pass, counter.ReasonOK, counter.ProtoUDP)},
		{Name: "wrongly expected to pass", At: sec, Frame: f, Want: sim.Pass, Delta: One(pass, counter.ReasonOK, counter.ProtoUDP)},
		{Name: "never run", At: sec, Frame: f, Want: sim.Drop},
	}}.Exec()
	require.NoError(t, err)
	assert.Equal(t, 2, res.Steps, "Result.Steps")
	require.Len(t, res.Failures, 2, "Result.Failures")
	assert.Contains(t, res.Failures[0], "step 1 (wrongly expected to pass), send 1 of 1: Run() = XDP_DROP, want XDP_PASS")
	assert.Contains(t, res.Failures[1], "(-want +got):\n+drop/limit/udp 1\n-pass/ok/udp 1\n")
	assert.Equal(t, filepath.Join(dir, "wrong_on_purpose.pcap"), res.Pcap, "Result.Pcap")

	got, err := sim.ReadPcap(res.Pcap)
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
