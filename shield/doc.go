// Package shield owns the XDP program `shield` and its maps: it loads the
// collection (optionally pinned, so a restart adopts it, converting state
// written with another clock, and state an earlier version pinned, which
// shield/oldpins reads), writes limits (config.Limits: the one type of the
// data path's settings, protected destinations and source key prefixes
// included), allow/deny lists and the machine's own addresses (SetOwn;
// shield/ownaddr follows them through netlink), and reads counters and
// per-source entries. The dropped frames the program copies to user space
// are read by shield/capture, given the perf buffer and the sampling
// variable.
//
// It is the only package that writes the program's maps. The values it
// writes and reads are its subpackages': shield/config (limits and their
// translation to the configuration entry), shield/lists (the lists and the
// verdict tries' entries computed from them), shield/source (the sources
// table's sources, layout and hash) and shield/counter (the counter
// types); they touch no map. Load does not attach the program
// (tests and the simulator run it unattached; its data-plane tests are in
// shield/datapath); package shield/pin attaches it for the service through
// a bpf_link pinned beside the maps, and detaches it, naming the pins Load
// makes with PinNames. Top (top.go) ranks talkers from a walk of the
// mapped sources table through a source.Ranking. It never sits on the
// packet path and never attaches anything.
package shield
