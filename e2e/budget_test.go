package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBudgetLimit(t *testing.T) {
	b := Budget{P99Ratio: 5, P99Floor: 15 * time.Millisecond, P99FloorKeep: 5 * time.Millisecond, P99Cap: 100 * time.Millisecond}
	for _, tc := range []struct {
		kind     Kind
		baseline time.Duration
		want     time.Duration
	}{
		{NewConn, 2 * time.Millisecond, 75 * time.Millisecond},   // floored at 15 ms
		{NewConn, 16 * time.Millisecond, 80 * time.Millisecond},  // 5x
		{NewConn, 40 * time.Millisecond, 100 * time.Millisecond}, // capped
		{KeepAlive, time.Millisecond, 25 * time.Millisecond},     // floored at 5 ms
		{KeepAlive, 8 * time.Millisecond, 40 * time.Millisecond},
		{KeepAlive, 0, 25 * time.Millisecond}, // no baseline: the floor
	} {
		assert.Equal(t, tc.want, b.Limit(tc.kind, tc.baseline), "Limit(%s, %v)", tc.kind, tc.baseline)
	}
	// No cap: the ratio alone.
	b.P99Cap = 0
	assert.Equal(t, 200*time.Millisecond, b.Limit(NewConn, 40*time.Millisecond), "Limit(new_conn, 40ms) with no cap")
}

func TestQuantile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var d []time.Duration
		for _, x := range xs {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // unsorted on purpose
	}
	for _, tc := range []struct {
		name string
		d    []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.99, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of 3", ms(3, 1, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p50 of 100", ms(hundred...), 0.5, 50 * time.Millisecond},
		{"max", ms(hundred...), 1, 100 * time.Millisecond},
	} {
		assert.Equal(t, tc.want, Quantile(tc.d, tc.q), "%s: Quantile(%v)", tc.name, tc.q)
	}
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
