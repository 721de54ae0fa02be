package testutil

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xdpshield/xdpshield/internal/features"
)

// TestFeatureSkips: a test needing a feature the kernel refuses skips, even
// under SHIELD_REQUIRE_PRIV=1, naming the feature and the errno (the kernel
// refusing is simulated with SHIELD_FEATURES_OFF).
func TestFeatureSkips(t *testing.T) {
	t.Setenv("SHIELD_REQUIRE_PRIV", "1")
	t.Setenv(features.Env, features.MapIter.Name)
	// No other test of this package probes MapIter: its one probe is this,
	// with the variable set.
	f := features.MapIter
	var skipped bool
	var msg string
	ok := t.Run("needs-iter", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		err := f.Check()
		msg = err.Error()
		Feature(t, f)
		assert.Fail(t, "Feature did not skip")
	})
	assert.True(t, ok, "the subtest failed instead of skipping")
	assert.True(t, skipped, "the subtest did not skip")
	assert.True(t, strings.HasPrefix(msg, "kernel feature map_elem_iter unavailable (EPERM)"), "skip message %q", msg)
}
