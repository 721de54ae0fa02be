// Package proc runs and reads the processes the study measures: the edge
// server in a process of its own inside the edge namespace (`shieldlab
// study-edge`, ServeEdge), so that its CPU time is its own, and the CPU
// readings of it and of the machine from /proc.
//
// It must not touch anything outside the namespace it is given.
package proc
