package shield

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
)

// TestBoundaries: every validated value is accepted at both ends of its
// documented range and refused one past each: the four limits in [1, 1e9]
// (Limits.Validate, SetLimits, and read back from the map as written), and
// the table size, a power of two in [MinTableSize, MaxTableSize]
// (Options.validate; loading 16M entries would take 1 GiB, so the largest
// loaded here is the default).
func TestBoundaries(t *testing.T) {
	good := config.Limits{Rate: 10, Burst: 10, AdmissionRate: 10, AdmissionBurst: 10}
	fields := []struct {
		name string
		max  uint64
		set  func(l *config.Limits, v uint64)
	}{
		{"rate", config.MaxRate, func(l *config.Limits, v uint64) { l.Rate = v }},
		{"burst", config.MaxBurst, func(l *config.Limits, v uint64) { l.Burst = v }},
		{"admission_rate", config.MaxRate, func(l *config.Limits, v uint64) { l.AdmissionRate = v }},
		{"admission_burst", config.MaxBurst, func(l *config.Limits, v uint64) { l.AdmissionBurst = v }},
	}
	s := loadT(t, Options{Clock: config.ClockVirtual, Limits: good})
	for _, f := range fields {
		for _, tc := range []struct {
			v  uint64
			ok bool
		}{{0, false}, {1, true}, {f.max, true}, {f.max + 1, false}} {
			t.Run(fmt.Sprintf("%s=%d", f.name, tc.v), func(t *testing.T) {
				l := good
				f.set(&l, tc.v)
				err := l.Validate()
				if !tc.ok {
					require.Error(t, err, "Validate(%+v)", l)
					assert.Contains(t, err.Error(), fmt.Sprintf("%s %d out of range [1, %d]", f.name, tc.v, f.max))
					assert.Error(t, s.SetLimits(l), "SetLimits(%+v)", l)
					return
				}
				require.NoError(t, err, "Validate(%+v)", l)
				require.NoError(t, s.SetLimits(l), "SetLimits(%+v)", l)
				cfg, _, err := s.readConfig()
				require.NoError(t, err)
				assert.Equal(t, l.WithDefaults(), config.LimitsOf(cfg, nil), "limits read back from the config map")
			})
		}
	}
	for _, tc := range []struct {
		size uint32
		ok   bool
	}{{0, false}, {MinTableSize - 1, false}, {MinTableSize, true}, {MaxTableSize, true}, {MaxTableSize + 1, false}} {
		t.Run(fmt.Sprintf("table=%d", tc.size), func(t *testing.T) {
			err := Options{TableSize: tc.size, Limits: good}.Validate()
			if tc.ok {
				assert.NoError(t, err, "validate(TableSize %d)", tc.size)
			} else {
				assert.ErrorContains(t, err, fmt.Sprintf("table size %d out of range [%d, %d]", tc.size, MinTableSize, MaxTableSize))
			}
		})
	}
	for _, size := range []uint32{MinTableSize + 1, 3 * MinTableSize, DefaultTableSize - 1, DefaultTableSize + MinTableSize} {
		t.Run(fmt.Sprintf("table=%d", size), func(t *testing.T) {
			err := Options{TableSize: size, Limits: good}.Validate()
			assert.ErrorContains(t, err, fmt.Sprintf("table size %d is not a power of two", size))
		})
	}
	t.Run("one set loads", func(t *testing.T) {
		one := loadT(t, Options{TableSize: MinTableSize, Clock: config.ClockVirtual, Limits: good})
		assert.Equal(t, uint32(MinTableSize), one.TableSize(), "TableSize()")
		// Its one set holds MinTableSize sources; the next replaces one.
		for i := range MinTableSize + 1 {
			require.NoError(t, one.SetTime(uint64(i+1)*1e9))
			require.Equal(t, uint32(xdpPass), run(t, one, frame4(fmt.Sprintf("198.18.0.%d", i+1))), "source %d", i+1)
		}
		n, err := one.CountSources(context.Background())
		require.NoError(t, err)
		assert.Equal(t, int(MinTableSize), n, "CountSources() of a one-set table after %d strangers", MinTableSize+1)
		_, ok, err := one.Source(netip.MustParseAddr("198.18.0.1"))
		require.NoError(t, err)
		assert.False(t, ok, "the least recently used source was replaced")
	})
}

// TestMaximumLimitsInTheProgram: at the largest accepted limits the
// program's credit arithmetic neither overflows nor clips: a full bucket
// (1e9 packets of 1e9 credit each) after an idle hour, and a refill of one
// packet per nanosecond.
func TestMaximumLimitsInTheProgram(t *testing.T) {
	top := config.Limits{Rate: config.MaxRate, Burst: config.MaxBurst, AdmissionRate: config.MaxRate, AdmissionBurst: config.MaxBurst}
	s := loadT(t, Options{Clock: config.ClockVirtual, Limits: top})
	f := frame4("198.18.0.9")
	require.NoError(t, s.SetTime(1e9))
	for i := range 100 {
		require.Equal(t, uint32(xdpPass), run(t, s, f), "packet %d at the largest limits", i)
	}
	require.NoError(t, s.SetTime(3600e9))
	assert.Equal(t, uint32(xdpPass), run(t, s, f), "after an idle hour")
	src, ok, err := s.Source(netip.MustParseAddr("198.18.0.9"))
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, uint64(101), src.Passed, "Source().Passed")
	assert.False(t, src.Limited, "Source().Limited with a full bucket")

	// Burst 1 at the largest rate: a packet per nanosecond, not one sooner.
	one := config.Limits{Rate: config.MaxRate, Burst: 1, AdmissionRate: config.MaxRate, AdmissionBurst: config.MaxBurst}
	require.NoError(t, s.SetLimits(one))
	g := frame4("198.18.0.10")
	require.NoError(t, s.SetTime(4000e9))
	assert.Equal(t, uint32(xdpPass), run(t, s, g), "first packet")
	assert.Equal(t, uint32(xdpDrop), run(t, s, g), "same nanosecond")
	require.NoError(t, s.SetTime(4000e9+1))
	assert.Equal(t, uint32(xdpPass), run(t, s, g), "one nanosecond later")
}
