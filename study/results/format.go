package results

import (
	"fmt"
)

// countedQ prints a quantile q (ms) of n samples, or n/a when n is under
// MinSamples(q).
func CountedQ(v float64, n uint64, q float64) string {
	if n < uint64(MinSamples(q)) {
		return fmt.Sprintf("n/a (n=%d)", n)
	}
	return fmt.Sprintf("%.2f", v)
}

// med is a median over runs, or n/a when no run had the figure.
func Med(s Stat, format string) string {
	if s.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf(format, s.Median)
}

func Spread(s Stat, format string) string {
	if s.N == 0 {
		return "n/a"
	}
	if s.N < 2 {
		return fmt.Sprintf(format, s.Median)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s.Median, s.Min, s.Max)
}

func Mpps(x float64) string { return fmt.Sprintf("%.2f", x/1e6) }
