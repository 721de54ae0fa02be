// Package results is what the study found: the figures of every section
// (legitimate traffic and drop capacity, the L7 peers, the deny lists, the
// balancer), their medians and spreads over runs, the statistics that
// decide whether two sets of runs differ (Mann-Whitney U, the sign test),
// the targets each figure is judged against and the defaults the data
// supports, and results.json and raw.json (Load, WriteRaw).
//
// It owns the figures, not their measurement (package study) nor their
// rendering (study/report); it touches no namespace, program or process.
package results
