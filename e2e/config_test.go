package e2e

import (
	"strings"
	"testing"
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
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("validate() with table size %d = %v, want nil", tc.size, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("validate() with table size %d = %v, want an error containing %q", tc.size, err, tc.want)
		}
	}
}
