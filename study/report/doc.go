// Package report renders what the study found (study/results): report.md
// with its tables, conclusion and targets, the headline table
// docs/measurements quotes, the PNG plots (drawn by gnuplot) and the
// published copy under docs/ (WriteDocs).
//
// It reads results and writes files; it measures nothing and never
// changes a figure.
package report
