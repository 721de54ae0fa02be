package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/xdpshield/xdpshield/e2e/parts"
)

func TestBudgetLimit(t *testing.T) {
	b := Budget{P99Ratio: 5, P99Floor: 15 * time.Millisecond, P99FloorKeep: 5 * time.Millisecond, P99Cap: 100 * time.Millisecond}
	for _, tc := range []struct {
		kind     parts.Kind
		baseline time.Duration
		want     time.Duration
	}{
		{parts.NewConn, 2 * time.Millisecond, 75 * time.Millisecond},   // floored at 15 ms
		{parts.NewConn, 16 * time.Millisecond, 80 * time.Millisecond},  // 5x
		{parts.NewConn, 40 * time.Millisecond, 100 * time.Millisecond}, // capped
		{parts.KeepAlive, time.Millisecond, 25 * time.Millisecond},     // floored at 5 ms
		{parts.KeepAlive, 8 * time.Millisecond, 40 * time.Millisecond},
		{parts.KeepAlive, 0, 25 * time.Millisecond}, // no baseline: the floor
	} {
		assert.Equal(t, tc.want, b.Limit(tc.kind, tc.baseline), "Limit(%s, %v)", tc.kind, tc.baseline)
	}
	// No cap: the ratio alone.
	b.P99Cap = 0
	assert.Equal(t, 200*time.Millisecond, b.Limit(parts.NewConn, 40*time.Millisecond), "Limit(new_conn, 40ms) with no cap")
}

// TestPhasePlan: `-sources few|many|both` picks the storm phases between
// the baseline and the recovery.
func TestPhasePlan(t *testing.T) {
	for _, tc := range []struct {
		sources string
		want    []string
	}{
		{"few", []string{"baseline", "few-sources", "recovery"}},
		{"many", []string{"baseline", "many-forged", "recovery"}},
		{"both", []string{"baseline", "few-sources", "many-forged", "recovery"}},
	} {
		var got []string
		for _, p := range phasePlan(tc.sources) {
			got = append(got, p.name)
		}
		assert.True(t, slices.Equal(got, tc.want), "phasePlan(%q) = %q, want %q", tc.sources, got, tc.want)

	}
}
