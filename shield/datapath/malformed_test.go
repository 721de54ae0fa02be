package datapath

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// TestMalformedPasses: every frame of the generated corpus passes with
// reason malformed or not_ip (protocol "other"), the test run never errors,
// and nothing is inserted into the sources table, even with every limit at
// its tightest and both lists covering everything.
func TestMalformedPasses(t *testing.T) {
	s := load(t, 4096, config.Limits{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1})
	addList(t, s, lists.DenyList, "0.0.0.0/0", "::/0")
	corpus := badCorpus()
	require.Greater(t, len(corpus), 300, "corpus size")
	steps := make([]sim.Step, len(corpus))
	counts := map[counter.Reason]int{}
	for i, c := range corpus {
		steps[i] = sim.Step{Name: c.name, At: sec, Frame: c.frame, Want: sim.Pass, Delta: One(pass, c.reason, counter.ProtoOther)}
		counts[c.reason]++
	}
	res := sim.Scenario{Name: t.Name(), Target: Target(s), Steps: steps}.Run(t)
	assert.Equal(t, len(corpus), res.Steps, "steps run")
	assert.NotZero(t, counts[counter.ReasonMalformed], "malformed frames in the corpus")
	assert.NotZero(t, counts[counter.ReasonNotIP], "non-IP frames in the corpus")
	n, err := s.CountSources(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n, "CountSources() after the corpus")

	// The well-formed originals are denied: the corpus's verdicts come from
	// parsing, not from a shield that passes everything.
	for _, f := range wellFormed() {
		got, err := sim.Run(s.Program(), f.Bytes())
		require.NoError(t, err)
		assert.Equal(t, sim.Drop, got, "Run(%s %d-tags %s)", f.Src, len(f.Tags), f.L4)
	}
}
