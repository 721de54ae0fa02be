// Package container is the container lane: the storm of package e2e with
// the shield, the edge and the storm each in a container, on a Docker
// daemon the test starts itself (Debian's docker.io; no iptables, no
// bridge, no forwarding, a private data root and socket) and drives with
// testcontainers-go. The images are FROM scratch around the project's one
// static binary (Dockerfile here), as nothing can be pulled.
//
// The edge and storm containers start with network mode none; the test
// names their namespaces (topo.Attach) and wires them with the storm's veth
// pairs. The shield container joins the edge's namespace (network mode
// container:ID) with every capability dropped but the documented minimum
// and the host's bpffs (a temporary directory of it) mounted, so its pins
// outlive it; it is restarted mid-storm to prove a new container adopts the
// pinned link. TestModernCapabilities proves the set for engines that know
// CAP_BPF without an engine, under setpriv.
//
// It must not change the root network namespace: the test compares links,
// routes and firewall rules before and after. It owns the daemon's
// temporary directory (xdps-dockerd-*), its containers, images and cgroups,
// and its pin roots (xdps-lane-PID, xdps-caps-PID); it touches nothing else,
// and removes what a killed run of its own left.
package container
