package testutil

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHangGuard: three times longer where the VM matrix says the CPU is
// emulated.
func TestHangGuard(t *testing.T) {
	t.Setenv("VMTEST_ACCEL", "tcg")
	assert.Equal(t, 30*time.Second, HangGuard(10*time.Second), "HangGuard under TCG")
}
