package pin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
)

// TestAttachRejects: Attach checks the options Load checks (shield's
// TestLoadRejects, the same cases) before it touches bpffs: bad options
// make not even the pin root.
func TestAttachRejects(t *testing.T) {
	testutil.Root(t)
	good := config.Limits{Rate: 10, Burst: 10, AdmissionRate: 10, AdmissionBurst: 10}
	with := func(f func(*config.Limits)) config.Limits { l := good; f(&l); return l }
	const maxRate, maxBurst = 1_000_000_000, 1_000_000_000 // shield's bounds of limits
	for _, tc := range []struct {
		name string
		opts shield.Options
		want []string // substrings of the error
	}{
		{"table 0", shield.Options{TableSize: 0, Limits: good}, []string{"table size 0 out of range [4, 16777216]"}},
		{"table too large", shield.Options{TableSize: shield.MaxTableSize + 1, Limits: good}, []string{"table size 16777217 out of range [4, 16777216]"}},
		{"table not a power of two", shield.Options{TableSize: 100_000, Limits: good}, []string{"table size 100000 is not a power of two", "65536 or 131072"}},
		{"table absurd", shield.Options{TableSize: 1<<32 - 1, Limits: good}, []string{"table size 4294967295 out of range"}},
		{"rate 0", shield.Options{Limits: with(func(l *config.Limits) { l.Rate = 0 })}, []string{"rate 0 out of range"}},
		{"burst 0", shield.Options{Limits: with(func(l *config.Limits) { l.Burst = 0 })}, []string{"burst 0 out of range"}},
		{"admission rate 0", shield.Options{Limits: with(func(l *config.Limits) { l.AdmissionRate = 0 })}, []string{"admission_rate 0 out of range"}},
		{"admission burst 0", shield.Options{Limits: with(func(l *config.Limits) { l.AdmissionBurst = 0 })}, []string{"admission_burst 0 out of range"}},
		{"rate too high", shield.Options{Limits: with(func(l *config.Limits) { l.Rate = maxRate + 1 })}, []string{"rate 1000000001 out of range"}},
		{"every bad field named", shield.Options{Limits: config.Limits{Rate: 0, Burst: maxBurst + 1, AdmissionRate: 1, AdmissionBurst: 0}},
			[]string{"rate 0", "burst 1000000001", "admission_burst 0"}},
		{"unknown clock", shield.Options{Clock: 9, Limits: good}, []string{"unknown clock 9"}},
	} {
		if tc.opts.TableSize == 0 && tc.name != "table 0" {
			tc.opts.TableSize = 4096
		}
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			a, err := Attach(AttachOptions{Iface: "lo", PinRoot: root, Load: tc.opts})
			if err == nil {
				a.Close()
			}
			require.Error(t, err, "Attach(%+v) = nil error, want one containing %q", tc.opts, tc.want)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w, "Attach(%+v) error", tc.opts)
			}
			_, err = os.Stat(root)
			assert.True(t, os.IsNotExist(err), "pin root after a rejected Attach: %v", err)
		})
	}
}
