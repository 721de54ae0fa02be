package testutil

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// ProgramMap opens the first map of program id that match accepts, for a
// test reading what an attached program (the service's, libxdp's slot)
// holds; it fails t when none does. The caller closes the map.
func ProgramMap(t testing.TB, id ebpf.ProgramID, match func(*ebpf.Map, *ebpf.MapInfo) bool) *ebpf.Map {
	t.Helper()
	p, err := ebpf.NewProgramFromID(id)
	require.NoError(t, err, "program %d", id)
	defer p.Close()
	info, err := p.Info()
	require.NoError(t, err)
	ids, ok := info.MapIDs()
	require.True(t, ok, "program %d: map IDs unavailable", id)
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		require.NoError(t, err)
		mi, err := m.Info()
		require.NoError(t, err)
		if match(m, mi) {
			return m
		}
		m.Close()
	}
	require.FailNow(t, "no such map", "program %d has no map that matches (maps %v)", id, ids)
	return nil
}
