package e2e

import (
	"slices"
	"testing"
	"time"
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
		if got := b.Limit(tc.kind, tc.baseline); got != tc.want {
			t.Errorf("Limit(%s, %v) = %v, want %v", tc.kind, tc.baseline, got, tc.want)
		}
	}
	// No cap: the ratio alone.
	b.P99Cap = 0
	if got, want := b.Limit(NewConn, 40*time.Millisecond), 200*time.Millisecond; got != want {
		t.Errorf("Limit(new_conn, 40ms) with no cap = %v, want %v", got, want)
	}
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
		if got := Quantile(tc.d, tc.q); got != tc.want {
			t.Errorf("%s: Quantile(%v) = %v, want %v", tc.name, tc.q, got, tc.want)
		}
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
		if !slices.Equal(got, tc.want) {
			t.Errorf("phasePlan(%q) = %q, want %q", tc.sources, got, tc.want)
		}
	}
}
