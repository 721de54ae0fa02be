// Package topo builds throwaway network topologies: named namespaces (all
// prefixed "xdps-"), veth pairs between them, addresses. It never changes the
// root namespace: every link it makes is created in, or moved into, a
// namespace it created, and Close removes the namespaces (and with them the
// links). Stale namespaces of dead processes are removed by CleanupStale.
package topo
