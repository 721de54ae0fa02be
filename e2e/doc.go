// Package e2e raises storms against the shield inside throwaway network
// namespaces and checks that the edge holds: an `edge` namespace (the shield
// on its veth ends, an HTTPS server with a certificate made at start-up, the
// service's API on loopback) and a `storm` namespace (a legitimate HTTPS
// client measuring latency, and the packet generators with forged sources),
// joined by a storm link and a client link (see storm.Topology for why
// two).
//
// It owns the scenario phases (baseline, few sources, many forged
// sources, recovery, and a contrast run with no program attached), their
// assertions and their report (table and JSON). The storm's building
// blocks are packages of their own: e2e/storm (the topology and the frame
// generators: the XDP live-frames program of bpf/storm.c, kernel 5.18+, and
// an AF_PACKET fallback) and e2e/parts (the edge's servers, the legitimate
// client, the shield service, the storm lock, and the deployments).
//
// Run takes the storm's parts from a parts.Deployment: parts.Local runs
// them in this process in namespaces it creates; the agents (the hidden
// `shieldlab e2e-edge` and `shieldlab e2e-storm`) serve the edge's and the
// storm's parts from another process, which is how e2e/container runs the
// same phases and assertions with every part in a container.
//
// Locally the shield runs through `shield serve`'s own wiring (service,
// parts.Local.StartShield): edge0 under the service with a temporary pin
// root on bpffs (xdpshield-storm-PID, removed at the end, or by the next
// run when the process died), the lock, the lists and limits of the
// Config, and the API with a token on reads and changes, which the run
// polls throughout (apiwatch.go); edge1 runs the same program and maps.
//
// It must not touch anything outside the namespaces it creates (internal/topo
// creates and removes them; the root namespace is never changed), must use
// addresses only from 198.18.0.0/15 and 2001:db8::/32, and every generator it
// starts is bounded in packets and in time. It reads the shield through
// shield.Shield and never writes the program's maps except through it.
package e2e
