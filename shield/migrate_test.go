package shield

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/oldpins"
	"github.com/xdpshield/xdpshield/shield/source"
)

// oldSource is one source as an earlier version's table held it.
type oldSource struct {
	addr netip.Addr
	val  oldpins.LRUSource
}

// oldSources are n sources drained at 5 s (credit 0), with distinct counts,
// and the all-zero key (the /64 ::/64), which must not read as empty.
func oldSources(n int) []oldSource {
	var out []oldSource
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		out = append(out, oldSource{a, oldpins.LRUSource{LastNs: 5e9, UnprotectedLastNs: 5e9, Passed: uint64(i + 1), Dropped: uint64(2*i + 7)}})
	}
	return append(out, oldSource{netip.IPv6Unspecified(), oldpins.LRUSource{LastNs: 5e9, Passed: 3, Dropped: 4}})
}

// TestMigrateOldPins: a restart on pins whose sources table is the former
// LRU hash (key 16 bytes, value 48), or a table of another size, or whose
// copy stopped halfway (the old table still pinned aside), copies every
// source into the new table with its state: its counts, and its drained
// bucket (no fresh burst: its next packet is dropped as over its limit,
// while the admission bucket is empty, so it was found, not admitted
// again). The old pin is gone afterwards, and a restart on the new pins
// copies nothing. Red without the copy (the drained sources are
// strangers, refused as admission).
func TestMigrateOldPins(t *testing.T) {
	l := config.Limits{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1}
	const n = 300
	for _, tc := range []struct {
		name string
		// old replaces the fresh pins' sources table with the old one.
		old  func(t *testing.T, dir string)
		from string
		size uint32 // the restart's table size
	}{
		{"lru", func(t *testing.T, dir string) { pinLRU(t, filepath.Join(dir, bpf.ShieldMapSources)) }, "LRU hash of 4096", 4096},
		{"lru halfway", func(t *testing.T, dir string) { pinLRU(t, filepath.Join(dir, oldpins.SourcesPin)) }, "LRU hash of 4096", 4096},
		{"other size", func(t *testing.T, dir string) {}, "table of 2048", 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := pinDir(t)
			first := uint32(4096)
			if tc.name == "other size" {
				first = 2048
			}
			s, err := Load(Options{TableSize: first, Clock: config.ClockVirtual, PinPath: dir, Limits: l})
			require.NoError(t, err, "fresh Load")
			// In the table of another size, a source whose set was full
			// replaced one already there: the copy has those fewer.
			held := n + 1
			if tc.name == "other size" {
				for _, o := range oldSources(n) {
					replaced, err := s.putSource(source.Key(o.addr, config.DefaultLimits()), o.val.Source(bpf.ShieldSrcKey{}), 0)
					require.NoError(t, err)
					if replaced {
						held--
					}
				}
			}
			s.Close()
			tc.old(t, dir)

			s, err = Load(Options{TableSize: tc.size, Clock: config.ClockVirtual, PinPath: dir, Limits: l})
			require.NoError(t, err, "Load on the old pins")
			defer s.Close()
			m, ok := s.Migrated()
			require.True(t, ok, "Migrated()")
			assert.Equal(t, tc.from, m.From, "Migrated().From")
			assert.Equal(t, tc.size, m.To, "Migrated().To")
			assert.Equal(t, held, m.Sources, "Migrated().Sources")
			assert.Equal(t, m.Sources, m.Moved+m.Replaced, "Moved + Replaced")
			assert.LessOrEqual(t, m.Replaced, 3, "Migrated().Replaced (their sets overflowed)")
			_, err = os.Stat(filepath.Join(dir, oldpins.SourcesPin))
			assert.ErrorIs(t, err, os.ErrNotExist, "the old table's pin after the copy")
			pinned, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.ShieldMapSources), nil)
			require.NoError(t, err)
			assert.Equal(t, ebpf.Array, pinned.Type(), "the pinned table's type")
			assert.Equal(t, tc.size/uint32(source.Ways), pinned.MaxEntries(), "the pinned table's sets")
			pinned.Close()
			assert.Equal(t, tc.size, s.TableSize(), "TableSize()")

			// Drain the admission bucket: a source not copied would be
			// refused as a stranger.
			require.NoError(t, s.SetTime(5e9))
			for i := range 2 {
				run(t, s, frame4(fmt.Sprintf("198.19.0.%d", i+1)))
			}
			missing := 0
			for _, o := range oldSources(n) {
				got, ok, err := s.Source(o.addr)
				require.NoError(t, err)
				if !ok {
					missing++
					continue
				}
				assert.Equal(t, o.val.Passed, got.Passed, "Source(%s).Passed", o.addr)
				assert.Equal(t, o.val.Dropped, got.Dropped, "Source(%s).Dropped", o.addr)
				if o.addr.Is4() {
					assert.Equal(t, uint32(xdpDrop), run(t, s, frame4(o.addr.String())), "%s: drained before the restart", o.addr)
					after, _, err := s.Source(o.addr)
					require.NoError(t, err)
					assert.Equal(t, o.val.Dropped+1, after.Dropped, "%s: dropped as over its limit, found in the table", o.addr)
				}
			}
			assert.Equal(t, m.Replaced+n+1-held, missing, "sources not found after the copy")
			s.Close()

			s, err = Load(Options{TableSize: tc.size, Clock: config.ClockVirtual, PinPath: dir, Limits: l})
			require.NoError(t, err, "Load on the new pins")
			_, ok = s.Migrated()
			assert.False(t, ok, "Migrated() on pins of this version")
		})
	}
}

// pinLRU pins at path (replacing what is there) an LRU hash of the former
// layout holding oldSources(300), as an earlier version left it.
func pinLRU(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "sources", Type: ebpf.LRUHash, KeySize: 16, ValueSize: 48, MaxEntries: 4096})
	require.NoError(t, err)
	defer m.Close()
	for _, o := range oldSources(300) {
		require.NoError(t, m.Put(source.Key(o.addr, config.DefaultLimits()), o.val))
	}
	require.NoError(t, m.Pin(path))
}

// TestMigrateRefusedKeepsOldPin: a load refused (here another pinned map
// no longer matches) must leave the old sources table pinned where it
// was, as the README says ("the old program stays attached"): moved aside
// and left there, the old binary restarted on the pins would pin a fresh,
// empty table in its place, and this version, finding both, would refuse
// every later start (the old-layout table at `sources` does not match).
func TestMigrateRefusedKeepsOldPin(t *testing.T) {
	dir := pinDir(t)
	pinLRU(t, filepath.Join(dir, bpf.ShieldMapSources))
	bad, err := ebpf.NewMap(&ebpf.MapSpec{Name: "counters", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	require.NoError(t, err)
	require.NoError(t, bad.Pin(filepath.Join(dir, bpf.ShieldMapCounters)))
	bad.Close()

	s, err := Load(Options{TableSize: 4096, Clock: config.ClockVirtual, PinPath: dir})
	if err == nil {
		s.Close()
	}
	require.Error(t, err, "Load on a pinned counters map of another shape succeeded, want it refused")
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.ShieldMapSources), nil)
	require.NoError(t, err, "the old sources table's pin after a refused load")
	assert.Equal(t, ebpf.LRUHash, m.Type(), "the table pinned at %s", bpf.ShieldMapSources)
	m.Close()
	_, err = os.Stat(filepath.Join(dir, oldpins.SourcesPin))
	assert.ErrorIs(t, err, os.ErrNotExist, "%s after a refused load", oldpins.SourcesPin)
}

// TestMigrateHalfwayThenOtherSize: a copy cut short leaves the old table
// at sources-old (still the attached program's: the link is replaced only
// after the copy) and a partial new table at sources. A restart with
// another table_size must copy from sources-old again, into a table of the
// new size, rather than refuse the partial table's size.
func TestMigrateHalfwayThenOtherSize(t *testing.T) {
	dir := pinDir(t)
	s, err := Load(Options{TableSize: 4096, Clock: config.ClockVirtual, PinPath: dir})
	require.NoError(t, err, "fresh Load")
	s.Close()
	pinLRU(t, filepath.Join(dir, oldpins.SourcesPin))

	s, err = Load(Options{TableSize: 8192, Clock: config.ClockVirtual, PinPath: dir})
	require.NoError(t, err, "Load with another size after a copy cut short")
	defer s.Close()
	m, ok := s.Migrated()
	require.True(t, ok, "Migrated()")
	assert.Equal(t, "LRU hash of 4096", m.From, "Migrated().From")
	assert.Equal(t, uint32(8192), s.TableSize(), "TableSize()")
	_, err = os.Stat(filepath.Join(dir, oldpins.SourcesPin))
	assert.ErrorIs(t, err, os.ErrNotExist, "the old table's pin after the copy")
}
