package kernel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		rel          string
		major, minor int
		ok           bool
	}{
		{"6.12.117+deb13-cloud-amd64", 6, 12, true},
		{"5.10.0-32-cloud-amd64", 5, 10, true},
		{"7.2", 7, 2, true},
		{"6.18.0", 6, 18, true},
		{"6", 6, 0, false},
		{"unknown", 0, 0, false},
		{"", 0, 0, false},
	} {
		ma, mi, ok := Version(tc.rel)
		assert.Equal(t, []any{tc.major, tc.minor, tc.ok}, []any{ma, mi, ok}, "Version(%q): major, minor, ok", tc.rel)
	}
	ma, mi, ok := Version(Release())
	require.True(t, ok, "the running kernel's release %q does not parse", Release())
	assert.True(t, AtLeast(ma, mi), "AtLeast(%d, %d) on the running %d.%d", ma, mi, ma, mi)
	assert.False(t, AtLeast(ma, mi+1), "AtLeast(%d, %d) on the running %d.%d", ma, mi+1, ma, mi)
	assert.False(t, AtLeast(ma+1, 0), "AtLeast(%d, 0) on the running %d.%d", ma+1, ma, mi)
	assert.True(t, AtLeast(ma-1, 99), "AtLeast(%d, 99) on the running %d.%d", ma-1, ma, mi)
}
