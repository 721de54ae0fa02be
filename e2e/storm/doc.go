// Package storm is where a storm happens and what it sends: the topology
// (an `edge` and a `storm` namespace joined by a storm link and a client
// link, their addresses, ports and routes; see Topology for why two links)
// and the frame generators that flood the storm link (the XDP live-frames
// program of bpf/storm.c, kernel 5.18+, and an AF_PACKET fallback), with
// the flows and frame templates they send and Run, which paces and bounds
// them.
//
// It owns the addresses of a storm and the frames on the wire. It knows
// nothing of the shield, the edge's servers, the legitimate client
// (e2e/parts) or the phases and assertions of a run (e2e): the study and
// the storms both build on it.
//
// It must not touch anything outside the namespaces it creates
// (internal/topo creates and removes them; the root namespace is never
// changed), must use addresses only from 198.18.0.0/15 and 2001:db8::/32,
// and every storm Run raises is bounded in frames and in time.
package storm

// Log attribute keys.
const (
	logErr = "err"
	logDev = "dev"
	logNS  = "namespaces"
)
