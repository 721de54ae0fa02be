// Package parts holds the running parts of a storm around the generators of
// e2e/storm: the edge's HTTPS server (with a certificate made at start-up)
// and its datagram service of known capacity, the legitimate client and
// the recorder of its latencies, the shield service on edge0 (`shield
// serve`'s own wiring, with a temporary pin root on bpffs,
// xdpshield-storm-PID, removed at the end or by the next run when the
// process died), the lock that keeps storms one at a time on a machine,
// and the deployments that start them: Local in this process, or the
// agents (agent.go, the hidden `shieldlab e2e-edge` and `shieldlab
// e2e-storm`) that serve the edge's and the storm's parts from another
// process, as e2e/container does with every part in a container.
//
// It owns no phase, assertion or report: e2e runs the phases and checks
// them; the study measures with the same parts.
//
// It must not touch anything outside the namespaces it is given, must use
// addresses only from 198.18.0.0/15 and 2001:db8::/32, and reads the
// shield through shield.Shield only.
package parts

// Log attribute keys.
const logErr = "err"
