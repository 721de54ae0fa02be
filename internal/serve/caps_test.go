package serve

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMissingCaps(t *testing.T) {
	bit := func(cs ...int) uint64 {
		var v uint64
		for _, c := range cs {
			v |= 1 << c
		}
		return v
	}
	for _, tc := range []struct {
		name     string
		eff      uint64
		adopting bool
		want     []string
	}{
		{"sys_admin alone", bit(capSysAdmin), false, nil},
		{"sys_admin alone, adopting", bit(capSysAdmin), true, nil},
		{"modern set", bit(capBPF, capNetAdmin, capPerfmon), false, nil},
		{"modern set, adopting", bit(capBPF, capNetAdmin, capPerfmon), true, []string{"CAP_SYS_ADMIN"}},
		{"none", 0, false, []string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"}},
		{"no bpf", bit(capNetAdmin, capPerfmon), false, []string{"CAP_BPF"}},
		{"no net_admin", bit(capBPF, capPerfmon), false, []string{"CAP_NET_ADMIN"}},
		{"no perfmon", bit(capBPF, capNetAdmin), false, []string{"CAP_PERFMON"}},
		{"net_admin alone", bit(capNetAdmin), false, []string{"CAP_BPF", "CAP_PERFMON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, missingCaps(tc.eff, tc.adopting), "missingCaps(%#x, %v)", tc.eff, tc.adopting)
		})
	}
}

// TestCapsErrorNamesUser: `docker run --user 65534 --cap-add
// CAP_SYS_ADMIN` gives serve CAP_SYS_ADMIN in its bounding set but not in
// its effective one; the error says that is why, not only that the
// capability is missing (issue 28). Root's error is as before.
func TestCapsErrorNamesUser(t *testing.T) {
	bnd := uint64(1) << capSysAdmin
	err := capsError([]string{"CAP_SYS_ADMIN"}, true, 65534, 0, bnd)
	require.Error(t, err)
	for _, want := range []string{"missing capability CAP_SYS_ADMIN", "uid 65534", "effective only for uid 0",
		"CAP_SYS_ADMIN is in the bounding set, not in the effective one", "ambient", "pin root"} {
		assert.Contains(t, err.Error(), want)
	}
	err = capsError([]string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"}, false, 1000, 0, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "uid 1000")
	assert.NotContains(t, err.Error(), "bounding set")
	err = capsError([]string{"CAP_BPF"}, false, 0, 0, 0)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "uid")
	assert.NoError(t, capsError(nil, true, 65534, bnd, bnd))
	// Not adopting, CAP_SYS_ADMIN (enough alone) is named as granted
	// though the message lists the modern set as missing.
	err = capsError([]string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"}, false, 65534, 0, bnd)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CAP_SYS_ADMIN is in the bounding set, not in the effective one")
}
