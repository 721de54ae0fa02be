package l7

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xdpshield/xdpshield/l7/policy"
)

// TestKernelPolicyNames: the kernel compares header names by their bytes,
// each with bit 0x20 set (bpf/l7.c, NW): a named header whose name that
// would fold onto another ('^' onto '~') keeps the policy on the proxy
// (issue 24, finding 6); names of up to 32 bytes (MaxHeaderNameLen) are
// compared whole.
func TestKernelPolicyNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		held bool
	}{
		{"X-User", true},
		{"x-a_b.c!#$%&'*+|`", true},
		{"X-Us^er", false},
		{"X-Us~er", false},
		{"X-" + strings.Repeat("a", 30), true},
	} {
		p, err := policy.Compile(policy.Config{
			Routes:     []policy.Route{{Name: "all", PathPrefix: "/", Backends: []string{"198.18.0.1:80"}}},
			HashHeader: tc.name,
		})
		if !assert.NoError(t, err, "Compile with hash_header %q", tc.name) {
			continue
		}
		kp, why := kernelPolicy(p)
		assert.Equal(t, tc.held, kp.Enabled == 1, "kernelPolicy(hash_header %q): enabled %d (%s)", tc.name, kp.Enabled, why)
		if !tc.held {
			continue
		}
		// The words hold the lowercase name, byte i at bits 8*(i%8) of
		// word i/8, with bit 0x20 set; the masks cover its bytes.
		lower := strings.ToLower(tc.name)
		for i := 0; i < 32; i++ {
			w, m := byte(kp.NameW[i/8]>>(8*(i%8))), byte(kp.NameM[i/8]>>(8*(i%8)))
			if i < len(lower) {
				assert.Equal(t, lower[i]|0x20, w, "%q: byte %d", tc.name, i)
				assert.Equal(t, byte(0xff), m, "%q: mask of byte %d", tc.name, i)
			} else {
				assert.Zero(t, w|m, "%q: byte %d past the name", tc.name, i)
			}
		}
	}
}
