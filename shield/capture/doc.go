// Package capture reads the dropped frames the shield program copies to
// its perf buffer (bpf/shield.c: the captured map, one drop in
// capture_sample): Switch turns the copying on (Start) and off (Stop,
// Close) through the capture_sample variable, one capture at a time, and
// a Capture reads the frames (Frame, cut to Snap bytes) and counts those
// the buffer had no room for.
//
// It must not touch any other map or variable of the program: package
// shield loads them and hands this package those two; it imports nothing
// of this module but shield/counter's types.
package capture
