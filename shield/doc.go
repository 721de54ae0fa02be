// Package shield owns the XDP program `shield` and its maps: it loads the
// collection (optionally pinned, so a restart adopts it, converting state
// written with another clock), writes limits (Limits: the one type of the
// data path's settings, protected destinations and source key prefixes
// included), allow/deny lists and the machine's own addresses (SetOwn,
// WatchOwn following netlink), and reads counters and per-source entries.
//
// It is the only package that writes the program's maps. Load does not
// attach the program (tests and the simulator run it unattached; its
// data-plane tests are in shield/datapath); Attach (attach.go, for the
// service) attaches it through a bpf_link pinned beside the maps, under an
// exclusive per-interface lock, adopting and replacing a pinned one; Detach
// removes both. Top (top.go) ranks talkers with chunked
// batch reads of the sources table. It never sits on the packet path.
package shield
