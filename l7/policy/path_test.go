package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNormalPath: inputs from envoy's path normalisation tests
// (envoyproxy/envoy test/common/http/path_utility_test.cc), WebKit's
// path canonicalisation layout test (LayoutTests/fast/url/path.html) and
// RFC 3986 section 5.2.4's example; the outputs are this package's
// choices (path.go): RFC 3986 section 6.2.2, runs of '/' merged, and a
// 400 (ErrAmbiguousPath) where envoy rewrites an escaped or raw '\' or '/'.
func TestNormalPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "": refused
		src      string
	}{
		{"/xyz", "/xyz", "envoy AlreadyNormalPaths"},
		{"/x/y/z", "/x/y/z", "envoy AlreadyNormalPaths"},
		{"/xyz/.%00../abc", "", "envoy InvalidPaths"},
		{"/xyz/%00.%00./abc", "", "envoy InvalidPaths"},
		{"/xyz/AAAAA%%0000/abc", "", "envoy InvalidPaths"},
		{"/a/b/../c", "/a/c", "envoy NormalizeValidPaths"},
		{"/a/b/./c", "/a/b/c", "envoy NormalizeValidPaths"},
		{"/a/b/../../../../c", "/c", "envoy NormalizeValidPaths"},
		{"/a/..\\c", "", "envoy NormalizeValidPaths (envoy: /c)"},
		{"/%c0%af", "/%C0%AF", "envoy NormalizeValidPaths"},
		{"/%5c%25", "", "envoy NormalizeValidPaths (envoy keeps it)"},
		{"/a/b/%2E%2E/c", "/a/c", "envoy NormalizeValidPaths"},
		{"/a/b/%2E./c", "/a/c", "envoy NormalizeValidPaths"},
		{"/a/b/%2E/c", "/a/b/c", "envoy NormalizeValidPaths"},
		{"/../a/b", "/a/b", "envoy NormalizeValidPaths"},
		{"/./a/b", "/a/b", "envoy NormalizeValidPaths"},
		{"/A/B/C", "/A/B/C", "envoy NormalizeCasePath"},
		{"/a/b/%2e%2e/c", "/a/c", "envoy NormalizeCasePath"},
		{"/a/%2F%2f/c", "", "envoy NormalizeCasePath (envoy keeps it)"},
		{"/a//b/c/", "/a/b/c/", "envoy MergeSlashes"},
		{"//a/b/c", "/a/b/c", "envoy MergeSlashes"},
		{"/a/b/c//", "/a/b/c/", "envoy MergeSlashes"},
		{"/a////b/c", "/a/b/c", "envoy MergeSlashes"},
		{"/././foo", "/foo", "WebKit path.html"},
		{"/./.foo", "/.foo", "WebKit path.html"},
		{"/foo/.", "/foo/", "WebKit path.html"},
		{"/foo/bar/..", "/foo/", "WebKit path.html"},
		{"/foo/..bar", "/foo/..bar", "WebKit path.html"},
		{"/foo/../../..", "/", "WebKit path.html"},
		{"/foo/%2e", "/foo/", "WebKit path.html"},
		{"/foo/%2e%2", "", "WebKit path.html (WebKit keeps the bad escape)"},
		{"/a/b/c/./../../g", "/a/g", "RFC 3986 5.2.4"},
		{"/%61dmin/secret", "/admin/secret", "issue 24"},
		{"/%7euser/%41%2d", "/~user/A-", "RFC 3986 2.3 (unreserved)"},
		{"/a%3bb%3B", "/a%3Bb%3B", "RFC 3986 6.2.2.1 (hex case)"},
		{"/x/..;/admin", "", "Orange Tsai, Breaking Parser Logic (Black Hat USA 2018)"},
		{"/x/.;a/admin", "", "Orange Tsai, Breaking Parser Logic (Black Hat USA 2018)"},
		{"/adm\tin", "", "issue 24"},
		{"/a%09b", "", "encoded control byte"},
		{"*", "*", "RFC 9112 3.2.4 asterisk-form, not origin-form"},
	} {
		got, err := NormalPath(tc.in)
		if tc.want == "" {
			assert.ErrorIs(t, err, ErrAmbiguousPath, "NormalPath(%q) = %q (%s)", tc.in, got, tc.src)
			continue
		}
		if assert.NoError(t, err, "NormalPath(%q) (%s)", tc.in, tc.src) {
			assert.Equal(t, tc.want, got, "NormalPath(%q) (%s)", tc.in, tc.src)
		}
		// The normal form is a fixed point.
		again, err := NormalPath(got)
		assert.NoError(t, err)
		assert.Equal(t, got, again, "NormalPath(NormalPath(%q))", tc.in)
	}
}
