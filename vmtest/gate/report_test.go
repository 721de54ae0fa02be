package gate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReportFigures: a baseline taken from a report keeps its figures but
// not the ones timed against another revision's program, and only from a
// report of the tree's own clean revision.
func TestReportFigures(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.json")
	figs := []Figures{{Kernel: Host, Release: "6.18.0", Speed: map[string]Path{
		"ok": {NsPerPkt: 30, VsBase: 1.02, BaseNsPerPkt: 29.4, VsBaseSpread: 0.03},
	}}}
	write := func(rev string) {
		b, err := json.Marshal(Report{Revision: rev, Figures: figs})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}

	write("abc123")
	got, err := ReportFigures(path, "abc123")
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, Path{NsPerPkt: 30}, got[0].Speed["ok"], "speed figures after ReportFigures")

	_, err = ReportFigures(path, "def456")
	assert.ErrorIs(t, err, ErrBaseline, "a report of another revision")
	write("abc123 (with uncommitted changes)")
	_, err = ReportFigures(path, "abc123")
	assert.ErrorIs(t, err, ErrBaseline, "a report of a dirty tree")
}
