package gate

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

var emit = flag.Bool("gate.emit", false, "print the figures on one line for the gate (in the VMs and on the host)")

// TestCollect measures the running kernel as the gate does and checks the
// figures are whole: every program of bpf/shield.c verified (shield only
// where BPF_CMPXCHG exists), an instruction count for each, every path
// timed on its path. With -gate.emit it prints them for the gate.
func TestCollect(t *testing.T) {
	testutil.Root(t)
	o := SpeedOptions{}
	if !*emit {
		o = SpeedOptions{Rounds: 2, Side: 4e6}
	}
	if dir := os.Getenv(SpeedBaseEnv); dir != "" {
		var err error
		o.Base, o.NoBase, err = SpeedBases(dir)
		require.NoError(t, err, "the base objects %s=%s", SpeedBaseEnv, dir)
	}
	f := Collect(os.Getenv("VMTEST_KERNEL"), o)
	if *emit {
		line, err := Emit(f)
		require.NoError(t, err)
		fmt.Println(line)
	}
	assert.Empty(t, f.Errors, "Collect() errors")
	// Every program of every object the gate tracks, loaded and counted.
	var names []string
	for _, o := range Objects {
		spec, err := o.Load()
		require.NoError(t, err)
		for n := range spec.Programs {
			names = append(names, o.Prefix+n)
		}
	}
	require.Contains(t, names, bpf.ShieldProgShield)
	require.Contains(t, names, "l7/"+bpf.L7ProgL7Parse)
	assert.Len(t, f.Programs, len(names), "Programs: %v", f.Programs)
	for _, name := range names {
		p, ok := f.Programs[name]
		require.True(t, ok, "Programs[%q] missing: %v", name, f.Programs)
		if name == bpf.ShieldProgShield && !testutil.KernelAtLeast(5, 12) {
			assert.False(t, p.Loaded, "shield loaded before 5.12 (no BPF_CMPXCHG)")
			continue
		}
		assert.True(t, p.Loaded, "Programs[%q].Loaded, error %q", name, p.Error)
		assert.NotZero(t, p.InsnsProcessed, "Programs[%q].InsnsProcessed", name)
		assert.NotZero(t, p.XlatedInsns, "Programs[%q].XlatedInsns", name)
	}
	if testutil.InVM() {
		assert.Empty(t, f.Speed, "Speed under emulation")
		return
	}
	require.Len(t, f.Speed, len(speedPaths), "Speed paths")
	for name, p := range f.Speed {
		assert.Empty(t, p.Error, "Speed[%q].Error", name)
		assert.Greater(t, p.Ratio, 0.5, "Speed[%q].Ratio", name)
		assert.Less(t, p.PrecisionNs, 0.1, "Speed[%q].PrecisionNs", name)
		if p.NoBase == "" && o.Base[objectOf(name)] != nil {
			assert.Greater(t, p.VsBase, 0.5, "Speed[%q].VsBase", name)
		}
		t.Logf("%-20s %7.3f ns/pkt  ref %6.3f  x%.3f  spread %.1f%%  precision %.1g ns  (test run: %.1f / %.1f ns)", name, p.NsPerPkt, p.RefNsPerPkt, p.Ratio, 100*p.Spread, p.PrecisionNs, p.TestRunNsPerPkt, p.TestRunRefNsPerPkt)
	}
	for name, p := range f.Programs {
		t.Logf("%-20s loaded %-5v processed %6d (%s) xlated %5d spec %5d %s", name, p.Loaded, p.InsnsProcessed, p.InsnsSource, p.XlatedInsns, p.SpecInsns, p.Error)
	}
}

// TestParseProcessed reads the stats line of verifier logs as 5.10 and 6.x
// print it.
func TestParseProcessed(t *testing.T) {
	for _, tc := range []struct {
		log  string
		want uint32
		ok   bool
	}{
		{"0: R1=ctx(id=0,off=0,imm=0) R10=fp0\nprocessed 1840 insns (limit 1000000) max_states_per_insn 4 total_states 98 peak_states 98 mark_read 17\n", 1840, true},
		{"verification time 312 usec\nstack depth 48\nprocessed 27 insns (limit 1000000) max_states_per_insn 0 total_states 2 peak_states 2 mark_read 1", 27, true},
		{"R0 !read_ok\nprocessed 5 insns (limit 1000000)", 5, true},
		{"no stats here", 0, false},
	} {
		got, ok := ParseProcessed(tc.log)
		assert.Equal(t, tc.ok, ok, "ParseProcessed(%q) ok", tc.log)
		assert.Equal(t, tc.want, got, "ParseProcessed(%q)", tc.log)
	}
}

// TestSpeedBases: a base revision from before the balancer has its
// shield object and no xdplb_bpfel.o: the shield is timed against its
// base, the balancer's paths have "no base", and reading it is no error.
func TestSpeedBases(t *testing.T) {
	dir := t.TempDir()
	obj, err := os.ReadFile(filepath.Join("..", "..", "bpf", "shield_bpfel.o"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shield_bpfel.o"), obj, 0o644))
	base, none, err := SpeedBases(dir)
	require.NoError(t, err)
	assert.NotNil(t, base["shield"], "the shield's base")
	assert.Nil(t, base["xdplb"], "the balancer's base")
	assert.Equal(t, map[string]string{"xdplb": "no base: the base revision has no bpf/xdplb_bpfel.o"}, none)
	for _, p := range speedPaths {
		assert.Contains(t, []string{"shield", "xdplb"}, p.object, "path %s", p.name)
		assert.Equal(t, p.object, objectOf(p.name), "path %s: the report names its object from its name", p.name)
	}
	// A damaged object is an error, not "no base".
	require.NoError(t, os.WriteFile(filepath.Join(dir, "xdplb_bpfel.o"), []byte("not ELF"), 0o644))
	_, _, err = SpeedBases(dir)
	assert.Error(t, err)
}
