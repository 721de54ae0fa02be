package results

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Stat
	}{
		{nil, Stat{}},
		{[]float64{3}, Stat{3, 3, 3, 1}},
		{[]float64{5, 1, 3}, Stat{3, 1, 5, 3}},
		{[]float64{4, 1, 3, 2}, Stat{2.5, 1, 4, 4}},
	} {
		assert.Equal(t, tc.want, StatOf(tc.in), "StatOf(%v)", tc.in)
	}
}

// TestStatistics (issue 26, finding 3): the tests' p-values match their
// textbook values, a quantile needs ten samples beyond it, and a missing
// figure stays missing through results.json (null, not 0).
func TestStatistics(t *testing.T) {
	// Mann-Whitney exact two-sided p: 5 against 5 fully apart is 2/252
	// (Mann & Whitney 1947, table I: P(U<=0) = 1/252 for n=m=5); 2
	// against 2 fully apart 2/6.
	assert.InDelta(t, 2.0/252, MannWhitney([]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}), 1e-12)
	assert.InDelta(t, 1.0/3, MannWhitney([]float64{1, 2}, []float64{3, 4}), 1e-12)
	assert.InDelta(t, 1, MannWhitney([]float64{1, 2, 3}, []float64{1, 2, 3}), 1e-12)
	// Sign test: 4 of 5 is p = 12/32 two-sided (the 0.19 is one
	// side), 5 of 5 is 2/32, 9 of 10 is 22/1024.
	assert.InDelta(t, 12.0/32, SignTest(4, 5), 1e-12)
	assert.InDelta(t, 2.0/32, SignTest(5, 5), 1e-12)
	assert.InDelta(t, 22.0/1024, SignTest(9, 10), 1e-12)

	assert.Equal(t, []int{20, 1000, 10000}, []int{MinSamples(0.5), MinSamples(0.99), MinSamples(0.999)})
	d := make([]time.Duration, 800) // a paced phase's keep-alive answers
	for i := range d {
		d[i] = time.Duration(i+1) * time.Millisecond
	}
	assert.Equal(t, Q(400), QuantileMs(d, 0.5))
	assert.False(t, QuantileMs(d, 0.99).OK(), "p99 of 800")
	assert.False(t, QuantileMs(d, 0.999).OK(), "p99.9 of 800: their maximum")
	assert.False(t, QuantileMs(nil, 0.5).OK(), "no answer: missing, not 0")
	assert.Equal(t, "n/a (n=800)", FmtQ(QuantileMs(d, 0.999), "%.2f", len(d)))

	b, err := json.Marshal(Sample{KAP50: 1.5, KAP99: missing})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"keep_alive_p50_ms":1.5,"keep_alive_p99_ms":null`)
	var back Sample
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, Q(1.5), back.KAP50)
	assert.False(t, back.KAP99.OK(), "null reads back as missing")
	assert.Equal(t, Stat{Median: 2, Min: 1, Max: 3, N: 2}, StatOf([]float64{1, math.NaN(), 3}), "a missing run is left out")
}
