package l7

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/l7/policy"
)

// fnv1a64 is FNV-1a, 64 bits, of s lowercased: how the kernel of a84ac4f
// recognised header names (with their length).
func fnv1a64(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i] | 0x20*byte(b2u('A' <= s[i] && s[i] <= 'Z')))
		h *= 0x100000001b3
	}
	return h
}

// TestL7HeaderNameTwin (issue 24, finding 6): header names are compared by
// their bytes. twin has named's length and FNV-1a 64 hash (a pair found
// once by Brent's cycle search over "x-" and 16 hex digits): to a kernel
// that recognised names by length and hash, twin: alice satisfied the
// rule allowing named: alice, and the denied request went to a backend.
func TestL7HeaderNameTwin(t *testing.T) {
	const named, twin = "X-4c7fc4f45038b763", "x-4c2bec742ce659ab"
	require.Len(t, twin, len(named))
	require.NotEqual(t, named, twin)
	require.Equal(t, fnv1a64(named), fnv1a64(twin), "the pair's hashes")
	d := newDiffEnv(t, func(c *policy.Config) {
		c.HashHeader = ""
		c.RBAC = []policy.Rule{{Action: "allow", Header: named, Value: "alice"}, {Action: "deny", PathPrefix: "/admin"}}
	})
	req := "GET /admin/secret HTTP/1.1\r\nHost: a.test\r\n" + twin + ": alice\r\n\r\n"
	assert.Equal(t, agrees, d.differ(t, "twin header", [][]byte{[]byte(req)}, false))
}
