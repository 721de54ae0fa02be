package shield

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/source"
	"github.com/xdpshield/xdpshield/sim"
)

// These tests sit inside the package to read the maps back through the
// loader's own accessors (readConfig, listFlags): "nothing changed" is
// checked on the kernel's copy, not on the Go struct.

func loadT(t *testing.T, opts Options) *Shield {
	t.Helper()
	testutil.Root(t)
	if opts.TableSize == 0 {
		opts.TableSize = 4096
	}
	s, err := Load(opts)
	require.NoError(t, err, "Load(%+v)", opts)
	t.Cleanup(func() { s.Close() })
	return s
}

// state is everything a rejected change must leave as it was.
type state struct {
	Config bpf.ShieldConfig
	Allow  []netip.Prefix
	Deny   []netip.Prefix
	Limits config.Limits
	// Verdicts is what the program reads: lists4/lists6.
	Verdicts map[netip.Prefix]uint8
}

func snapshot(t *testing.T, s *Shield) state {
	t.Helper()
	cfg, ok, err := s.readConfig()
	require.NoError(t, err, "readConfig()")
	require.True(t, ok, "readConfig(): no configuration published")
	allow, err := s.List(lists.AllowList)
	require.NoError(t, err, "List(allow)")
	deny, err := s.List(lists.DenyList)
	require.NoError(t, err, "List(deny)")
	verdicts, err := s.readVerdicts(s.gen)
	require.NoError(t, err, "readVerdicts()")
	// Which presence filter answers is a refresh's business (an adopting
	// load refreshes), not a change of what is in force.
	cfg.Filter = 0
	return state{Config: cfg, Allow: allow, Deny: deny, Limits: s.Limits(), Verdicts: verdicts}
}

// frame4 is a minimal Ethernet + IPv4 + UDP frame from src.
func frame4(src string) []byte {
	b := make([]byte, 14+20+8)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 28)
	ip[8], ip[9] = 64, 17
	a := netip.MustParseAddr(src).As4()
	copy(ip[12:], a[:])
	copy(ip[16:], []byte{198, 18, 255, 254})
	return b
}

func run(t *testing.T, s *Shield, frame []byte) uint32 {
	t.Helper()
	ret, err := sim.Run(s.Program(), frame)
	require.NoError(t, err, "Run()")
	return uint32(ret)
}

const (
	xdpDrop = 1
	xdpPass = 2
)

func TestLoadRejects(t *testing.T) {
	testutil.Root(t)
	good := config.Limits{Rate: 10, Burst: 10, AdmissionRate: 10, AdmissionBurst: 10}
	with := func(f func(*config.Limits)) config.Limits { l := good; f(&l); return l }
	for _, tc := range []struct {
		name string
		opts Options
		want []string // substrings of the error
	}{
		{"table 0", Options{TableSize: 0, Limits: good}, []string{"table size 0 out of range [4, 16777216]"}},
		{"table too large", Options{TableSize: MaxTableSize + 1, Limits: good}, []string{"table size 16777217 out of range [4, 16777216]"}},
		{"table not a power of two", Options{TableSize: 100_000, Limits: good}, []string{"table size 100000 is not a power of two", "65536 or 131072"}},
		{"table absurd", Options{TableSize: 1<<32 - 1, Limits: good}, []string{"table size 4294967295 out of range"}},
		{"rate 0", Options{Limits: with(func(l *config.Limits) { l.Rate = 0 })}, []string{"rate 0 out of range"}},
		{"burst 0", Options{Limits: with(func(l *config.Limits) { l.Burst = 0 })}, []string{"burst 0 out of range"}},
		{"admission rate 0", Options{Limits: with(func(l *config.Limits) { l.AdmissionRate = 0 })}, []string{"admission_rate 0 out of range"}},
		{"admission burst 0", Options{Limits: with(func(l *config.Limits) { l.AdmissionBurst = 0 })}, []string{"admission_burst 0 out of range"}},
		{"rate too high", Options{Limits: with(func(l *config.Limits) { l.Rate = config.MaxRate + 1 })}, []string{"rate 1000000001 out of range"}},
		{"every bad field named", Options{Limits: config.Limits{Rate: 0, Burst: config.MaxBurst + 1, AdmissionRate: 1, AdmissionBurst: 0}},
			[]string{"rate 0", "burst 1000000001", "admission_burst 0"}},
		{"unknown clock", Options{Clock: 9, Limits: good}, []string{"unknown clock 9"}},
	} {
		if tc.opts.TableSize == 0 && tc.name != "table 0" {
			tc.opts.TableSize = 4096
		}
		t.Run(tc.name, func(t *testing.T) {
			// Rejected before anything exists: not even the pin directory.
			tc.opts.PinPath = filepath.Join(t.TempDir(), "pins")
			s, err := Load(tc.opts)
			if err == nil {
				s.Close()
			}
			require.Error(t, err, "Load(%+v) = nil error, want one containing %q", tc.opts, tc.want)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w, "Load(%+v) error", tc.opts)
			}
			_, err = os.Stat(tc.opts.PinPath)
			assert.True(t, os.IsNotExist(err), "pin directory after a rejected Load: %v", err)
			// pin.Attach checks the same options before it touches bpffs
			// (pin's TestAttachRejects).
		})
	}
}

// TestLoadDefaults: zero Limits mean DefaultLimits; the table is as large
// as asked.
func TestLoadDefaults(t *testing.T) {
	testutil.Root(t)
	s, err := Load(Options{TableSize: DefaultTableSize, Clock: config.ClockVirtual})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, uint32(DefaultTableSize), s.TableSize(), "TableSize()")
	info, err := s.objs.Sources.Info()
	require.NoError(t, err)
	assert.Equal(t, uint32(DefaultTableSize/uint32(source.Ways)), info.MaxEntries, "sources max_entries (sets)")
	assert.Equal(t, uint32(source.SetSize), info.ValueSize, "sources value size (a set)")
	assert.Equal(t, 64, source.SetSize/int(uint32(source.Ways)), "bytes per way")
	assert.Equal(t, config.DefaultLimits(), s.Limits(), "Limits()")
	assert.Equal(t, config.DefaultLimits(), snapshot(t, s).Limits)
	cfg, _, err := s.readConfig()
	require.NoError(t, err)
	assert.Equal(t, config.DefaultLimits(), config.LimitsOf(cfg, nil), "limits in the config map")
}

func TestSetLimitsRejectsAndChangesNothing(t *testing.T) {
	s := loadT(t, Options{Clock: config.ClockVirtual, Limits: config.Limits{Rate: 5, Burst: 7, AdmissionRate: 11, AdmissionBurst: 13}})
	addT(t, s, lists.DenyList, "203.0.113.0/24")
	before := snapshot(t, s)
	for _, bad := range []config.Limits{
		{Rate: 0, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1},
		{Rate: 1, Burst: 0, AdmissionRate: 1, AdmissionBurst: 1, DryRun: true},
		{Rate: 1, Burst: 1, AdmissionRate: 0, AdmissionBurst: 1},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 0},
		{Rate: config.MaxRate + 1, Burst: config.MaxBurst + 1, AdmissionRate: 1, AdmissionBurst: 1},
		{},
	} {
		err := s.SetLimits(bad)
		assert.Error(t, err, "SetLimits(%+v)", bad)
		assert.Equal(t, before, snapshot(t, s), "state after SetLimits(%+v)", bad)
	}
}

// TestSetLimitsWithoutReload: the same program (same ID) sees a new limit
// and dry-run at once, and the config map holds exactly the new limits.
func TestSetLimitsWithoutReload(t *testing.T) {
	s := loadT(t, Options{Clock: config.ClockVirtual, Limits: config.Limits{Rate: 1, Burst: 1, AdmissionRate: 100, AdmissionBurst: 100}})
	info, err := s.Program().Info()
	require.NoError(t, err)
	id, _ := info.ID()
	require.NoError(t, s.SetTime(1e9))
	f := frame4("198.18.0.1")
	assert.Equal(t, uint32(xdpPass), run(t, s, f), "first packet")
	assert.Equal(t, uint32(xdpDrop), run(t, s, f), "over burst 1")

	dry := config.Limits{Rate: 1, Burst: 1, AdmissionRate: 100, AdmissionBurst: 100, DryRun: true}
	require.NoError(t, s.SetLimits(dry))
	assert.Equal(t, uint32(xdpPass), run(t, s, f), "over burst in dry-run")
	assert.Equal(t, dry.WithDefaults(), snapshot(t, s).Limits)
	cfg, _, err := s.readConfig()
	require.NoError(t, err)
	assert.Equal(t, dry.WithDefaults(), config.LimitsOf(cfg, nil), "limits in the config map")

	// A bigger burst applies to the existing bucket at its next refill.
	big := config.Limits{Rate: 1, Burst: 3, AdmissionRate: 100, AdmissionBurst: 100}
	require.NoError(t, s.SetLimits(big))
	require.NoError(t, s.SetTime(100e9))
	for i := range 3 {
		assert.Equal(t, uint32(xdpPass), run(t, s, f), "packet %d of the new burst", i)
	}
	assert.Equal(t, uint32(xdpDrop), run(t, s, f), "over the new burst")

	info, err = s.Program().Info()
	require.NoError(t, err)
	id2, _ := info.ID()
	assert.Equal(t, id, id2, "program ID after SetLimits")
}

func addT(t *testing.T, s *Shield, l lists.List, cidrs ...string) {
	t.Helper()
	ps, err := lists.ParsePrefixes(cidrs)
	require.NoError(t, err, "ParsePrefixes(%q)", cidrs)
	require.NoError(t, second(s.Add(l, ps)), "Add(%s, %q)", l, cidrs)
}

func TestParsePrefixes(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string // as Prefix.String(); nil when an error is wanted
		errs []string // substrings, one per bad entry
	}{
		{in: []string{"198.18.0.0/15", "198.18.0.1", "2001:db8::/32", "2001:db8::1"},
			want: []string{"198.18.0.0/15", "198.18.0.1/32", "2001:db8::/32", "2001:db8::1/128"}},
		{in: []string{"::ffff:198.18.0.1"}, want: []string{"198.18.0.1/32"}},
		{in: []string{"198.18.0.1/16"}, errs: []string{`"198.18.0.1/16" has host bits set (did you mean 198.18.0.0/16?)`}},
		{in: []string{"2001:db8::1/32"}, errs: []string{"has host bits set (did you mean 2001:db8::/32?)"}},
		{in: []string{"not-a-cidr"}, errs: []string{`"not-a-cidr" is not an address or CIDR`}},
		{in: []string{"198.18.0.0/33"}, errs: []string{"is not an address or CIDR"}},
		{in: []string{"::ffff:198.18.0.0/112"}, errs: []string{"write IPv4-mapped prefixes as IPv4"}},
		{in: []string{"fe80::1%eth0"}, errs: []string{"zones are not allowed"}},
		{in: []string{""}, errs: []string{`"" is not an address or CIDR`}},
		{in: []string{"198.18.0.0/15", "10.0.0.1/8", "2001:db8::/32", "bogus"},
			errs: []string{"10.0.0.1/8", "bogus"}},
	} {
		got, err := lists.ParsePrefixes(tc.in)
		if tc.want != nil {
			require.NoError(t, err, "ParsePrefixes(%q)", tc.in)
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			assert.Equal(t, tc.want, s, "ParsePrefixes(%q)", tc.in)
			continue
		}
		require.Error(t, err, "ParsePrefixes(%q)", tc.in)
		assert.Nil(t, got, "ParsePrefixes(%q) must return nothing on error", tc.in)
		for _, e := range tc.errs {
			assert.Contains(t, err.Error(), e, "ParsePrefixes(%q) error", tc.in)
		}
	}
}

// TestAddAllOrNothing: a batch with one bad prefix among good ones changes
// neither trie nor the flags in the config map.
func TestAddAllOrNothing(t *testing.T) {
	s := loadT(t, Options{Clock: config.ClockVirtual})
	addT(t, s, lists.AllowList, "192.0.2.0/24")
	good := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tc := range []struct {
		name string
		bad  netip.Prefix
		want string
	}{
		{"host bits", netip.PrefixFrom(netip.MustParseAddr("198.18.0.1"), 16), "invalid prefix"},
		{"zero prefix", netip.Prefix{}, "invalid prefix"},
		{"mapped", netip.MustParsePrefix("::ffff:198.18.0.0/112"), "invalid prefix"},
	} {
		for _, l := range []lists.List{lists.AllowList, lists.DenyList} {
			t.Run(tc.name+"/"+l.String(), func(t *testing.T) {
				before := snapshot(t, s)
				batch := append(append([]netip.Prefix{}, good[0], tc.bad), good[1])
				_, err := s.Add(l, batch)
				require.Error(t, err, "Add(%s, %v)", l, batch)
				assert.Contains(t, err.Error(), tc.want)
				assert.ErrorIs(t, err, config.ErrInvalid)
				assert.Equal(t, before, snapshot(t, s), "state after a rejected Add")
			})
		}
	}

	// Over capacity: checked whole before any write.
	before := snapshot(t, s)
	many := make([]netip.Prefix, 0, MaxListEntries+1)
	for i := range MaxListEntries + 1 {
		many = append(many, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32))
	}
	_, err := s.Add(lists.DenyList, many)
	require.Error(t, err, "Add(%d prefixes)", len(many))
	assert.Contains(t, err.Error(), "the limit is 65536")
	assert.ErrorIs(t, err, config.ErrInvalid)
	assert.Equal(t, before, snapshot(t, s), "state after an over-capacity Add")

	// Adding what is already there changes nothing either.
	addT(t, s, lists.AllowList, "192.0.2.0/24")
	assert.Equal(t, before, snapshot(t, s), "state after adding a listed prefix")
}

// TestRemove: removing a prefix that is not listed (alone or among listed
// ones) changes nothing; removing the last prefix of a family clears its
// flag, so the program stops looking the trie up.
func TestRemove(t *testing.T) {
	s := loadT(t, Options{Clock: config.ClockVirtual})
	addT(t, s, lists.DenyList, "198.18.0.0/15", "2001:db8::/32")
	before := snapshot(t, s)
	require.Equal(t, config.FlagDeny4|config.FlagDeny6, before.Config.Flags&(config.FlagDeny4|config.FlagDeny6), "flags with both families listed")
	for _, missing := range [][]string{
		{"203.0.113.0/24"},
		{"198.18.0.0/15", "203.0.113.0/24"},
		{"2001:db8::/48", "2001:db8::/32"},
	} {
		ps, err := lists.ParsePrefixes(missing)
		require.NoError(t, err)
		_, err = s.Remove(lists.DenyList, ps)
		require.Error(t, err, "Remove(deny, %q)", missing)
		assert.Contains(t, err.Error(), "not on the deny list: ")
		assert.ErrorIs(t, err, config.ErrInvalid)
		assert.Equal(t, before, snapshot(t, s), "state after Remove(deny, %q)", missing)
	}
	// The allow list does not hold the deny list's prefixes.
	ps, _ := lists.ParsePrefixes([]string{"198.18.0.0/15"})
	require.Error(t, second(s.Remove(lists.AllowList, ps)))
	assert.Equal(t, before, snapshot(t, s), "state after Remove(allow, a deny prefix)")

	require.NoError(t, second(s.Remove(lists.DenyList, ps)))
	after := snapshot(t, s)
	assert.Equal(t, map[netip.Prefix]uint8{netip.MustParsePrefix("2001:db8::/32"): lists.VerdictDeny | lists.InDeny}, after.Verdicts, "verdict tries")
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}, after.Deny, "List(deny)")
	assert.Equal(t, config.FlagDeny6, after.Config.Flags&(config.FlagDeny4|config.FlagDeny6), "flags after the last IPv4 prefix left")
}

// TestCmpxchgProbe: a kernel of 5.12 or later has BPF_CMPXCHG; not finding
// it there is a failure, not a fallback.
func TestCmpxchgProbe(t *testing.T) {
	testutil.Root(t)
	testutil.Kernel(t, 5, 12, "BPF_CMPXCHG")
	assert.True(t, haveCmpxchg(), "haveCmpxchg() on a 5.12+ kernel")
	s := loadT(t, Options{Clock: config.ClockVirtual})
	assert.False(t, s.Compat(), "Compat()")
	info, err := s.Program().Info()
	require.NoError(t, err)
	assert.Equal(t, bpf.ShieldProgShield, info.Name, "program name")
}

// TestCompatProgram loads shield_compat, the program for kernels without
// BPF_CMPXCHG, in shield's place and checks it limits.
func TestCompatProgram(t *testing.T) {
	forceCompat = true
	t.Cleanup(func() { forceCompat = false })
	s := loadT(t, Options{Clock: config.ClockVirtual, Limits: config.Limits{Rate: 1, Burst: 2, AdmissionRate: 1, AdmissionBurst: 1}})
	assert.True(t, s.Compat(), "Compat()")
	info, err := s.Program().Info()
	require.NoError(t, err)
	assert.Equal(t, bpf.ShieldProgShieldCompat, info.Name, "program name")
	require.NoError(t, s.SetTime(1e9))
	f := frame4("198.18.0.1")
	got := []uint32{run(t, s, f), run(t, s, f), run(t, s, f), run(t, s, frame4("198.18.0.2"))}
	assert.Equal(t, []uint32{xdpPass, xdpPass, xdpDrop, xdpDrop}, got, "burst 2, then limit, then admission")
	require.NoError(t, s.SetTime(2e9))
	assert.Equal(t, uint32(xdpPass), run(t, s, f), "after a 1 s refill")
}

// TestCountersByCPU: the per-CPU counters sum to Counters.
func TestCountersByCPU(t *testing.T) {
	s := loadT(t, Options{Clock: config.ClockVirtual})
	for range 5 {
		run(t, s, frame4("198.18.0.1"))
	}
	run(t, s, make([]byte, 20)) // EtherType 0: not IP
	total, err := s.Counters()
	require.NoError(t, err)
	per, err := s.CountersByCPU()
	require.NoError(t, err)
	var sum counter.Counters
	for _, c := range per {
		c.Each(func(v counter.Verdict, r counter.Reason, p counter.Proto, n uint64) { sum[v][r][p] += n })
	}
	assert.Equal(t, total, sum, "sum of CountersByCPU()")
	assert.Equal(t, uint64(6), total.Total(), "Counters().Total()")
}

func TestWantVerdicts(t *testing.T) {
	pp := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		allow, deny []netip.Prefix
		want        map[string]uint8
	}{
		{"empty", nil, nil, map[string]uint8{}},
		{"disjoint", pp("10.0.0.0/8"), pp("192.0.2.0/24"), map[string]uint8{"10.0.0.0/8": lists.VerdictAllow, "192.0.2.0/24": lists.VerdictDeny}},
		{"deny inside allow is allowed", pp("198.18.0.0/15"), pp("198.18.1.0/24", "198.18.1.7/32"),
			map[string]uint8{"198.18.0.0/15": lists.VerdictAllow, "198.18.1.0/24": lists.VerdictAllow, "198.18.1.7/32": lists.VerdictAllow}},
		{"allow inside deny", pp("198.18.1.0/24"), pp("198.18.0.0/15"), map[string]uint8{"198.18.0.0/15": lists.VerdictDeny, "198.18.1.0/24": lists.VerdictAllow}},
		{"on both lists", pp("2001:db8::/32"), pp("2001:db8::/32", "2001:db8:1::/48", "2001:db9::/32"),
			map[string]uint8{"2001:db8::/32": lists.VerdictAllow, "2001:db8:1::/48": lists.VerdictAllow, "2001:db9::/32": lists.VerdictDeny}},
		{"allow everything", pp("0.0.0.0/0"), pp("203.0.113.0/24"), map[string]uint8{"0.0.0.0/0": lists.VerdictAllow, "203.0.113.0/24": lists.VerdictAllow}},
		{"families apart", pp("0.0.0.0/0"), pp("::/0"), map[string]uint8{"0.0.0.0/0": lists.VerdictAllow, "::/0": lists.VerdictDeny}},
	} {
		got := map[string]uint8{}
		for p, v := range lists.Want(tc.allow, tc.deny) {
			got[p.String()] = v & lists.VerdictMask
		}
		assert.Equal(t, tc.want, got, "wantVerdicts(%v, %v) (%s)", tc.allow, tc.deny, tc.name)
	}
}

// second drops a call's first result, for checking its error.
func second[T any](_ T, err error) error { return err }
