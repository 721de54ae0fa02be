package results

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/xdpshield/xdpshield/e2e/parts"
)

// Q is a figure that may be missing (NaN): a quantile of too few samples,
// a phase with no answer. It is written as null in JSON, never as 0.
type Q float64

// missing is the value of a missing Q.
var missing = Q(math.NaN())

// OK says whether q holds a figure.
func (q Q) OK() bool { return !math.IsNaN(float64(q)) }

func (q Q) MarshalJSON() ([]byte, error) {
	if !q.OK() || math.IsInf(float64(q), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(q), 'g', -1, 64), nil
}

func (q *Q) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*q = missing
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return err
	}
	*q = Q(f)
	return nil
}

// MinSamples is the least sample a quantile q is reported from: ten
// samples beyond it (p50: 20, p99: 1,000, p99.9: 10,000); with fewer, the
// "p99.9" of 800 samples is their maximum.
func MinSamples(q float64) int { return int(math.Ceil(10/(1-q) - 1e-9)) }

// quantileMs is the q-quantile of d in ms, or missing when d is too small
// a sample to carry it.
func QuantileMs(d []time.Duration, q float64) Q {
	if len(d) < MinSamples(q) {
		return missing
	}
	return Q(float64(parts.Quantile(slices.Clone(d), q)) / 1e6)
}

// fmtQ prints a figure, or "n/a (n=N)" when it is missing.
func FmtQ(q Q, format string, n int) string {
	if !q.OK() {
		return fmt.Sprintf("n/a (n=%d)", n)
	}
	return fmt.Sprintf(format, float64(q))
}

// MannWhitney is the exact two-sided p-value of the Mann-Whitney U test
// (Wilcoxon rank-sum) of samples a and b, ties given their mean rank: the
// probability, were both drawn from one distribution, of a U at least as
// far from its mean as the one observed. It enumerates every split of
// the pooled ranks, fine for the study's runs (5 and 5: 252 splits).
// With 2 runs and 2 the least p is 1/3: two runs never separate.
func MannWhitney(a, b []float64) float64 {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return 1
	}
	all := append(slices.Clone(a), b...)
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		switch {
		case all[i] < all[j]:
			return -1
		case all[i] > all[j]:
			return 1
		}
		return 0
	})
	rank := make([]float64, len(all))
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && all[idx[j]] == all[idx[i]] {
			j++
		}
		for k := i; k < j; k++ {
			rank[idx[k]] = float64(i+j+1) / 2 // mean of ranks i+1..j
		}
		i = j
	}
	sumA := 0.0
	for i := range n {
		sumA += rank[i]
	}
	mean := float64(n) * float64(n+m+1) / 2
	obs := math.Abs(sumA - mean)
	// Every way of giving n of the pooled ranks to a.
	extreme, total := 0, 0
	var walk func(start, left int, sum float64)
	walk = func(start, left int, sum float64) {
		if left == 0 {
			total++
			if math.Abs(sum-mean) >= obs-1e-9 {
				extreme++
			}
			return
		}
		for i := start; i <= len(rank)-left; i++ {
			walk(i+1, left-1, sum+rank[i])
		}
	}
	walk(0, n, 0)
	return float64(extreme) / float64(total)
}

// SignTest is the exact two-sided p-value of the sign test: k of n paired
// runs went one way, were either way equally likely.
func SignTest(k, n int) float64 {
	if n == 0 {
		return 1
	}
	k = max(k, n-k)
	tail := 0.0
	for i := k; i <= n; i++ {
		tail += binom(n, i)
	}
	return min(1, 2*tail/math.Pow(2, float64(n)))
}

func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

// Alpha is the significance the study's verdicts need.
const Alpha = 0.05

// differ compares two sets of runs: whether they separate (Mann-Whitney
// p < Alpha) and how the test reads, for the report.
func Differ(a, b []float64) (bool, string) {
	a, b = valid(a), valid(b)
	p := MannWhitney(a, b)
	return p < Alpha, fmt.Sprintf("Mann-Whitney U over %d and %d runs, p = %.3f", len(a), len(b), p)
}

// valid drops missing figures.
func valid(xs []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(xs), func(x float64) bool { return math.IsNaN(x) })
}
