package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestConfigTableSize: a table size the shield cannot load (not a power of
// two since the table is sets of 4) is refused with the rest of the
// configuration, before namespaces are built and the service refuses it;
// 0 is the service's default.
func TestConfigTableSize(t *testing.T) {
	for _, tc := range []struct {
		size uint32
		want string // "" accepted
	}{
		{1 << 16, ""},
		{100_000, "not a power of two"},
		{0, ""},
		{3000, "not a power of two"},
	} {
		cfg := DefaultConfig()
		cfg.TableSize = tc.size
		err := cfg.validate()
		if tc.want == "" {
			assert.NoError(t, err, "validate() with table size %d", tc.size)
		} else {
			assert.ErrorContains(t, err, tc.want, "validate() with table size %d", tc.size)
		}

	}
}
