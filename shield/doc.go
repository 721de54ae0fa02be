// Package shield owns the XDP program `shield` and its maps: it loads the
// collection (optionally pinned, so a restart adopts it), writes limits and
// allow/deny lists, and reads counters and per-source entries.
//
// It is the only package that writes the program's maps. It does not attach
// the program (the service and tests decide where) and never sits on the
// packet path.
package shield
