// Package lb is the socket-level L4 balancer: it loads the cgroup sock-addr
// programs of bpf/lb.c, attaches them to a cgroup v2 directory, and owns
// their maps: services by (VIP, port, protocol), backends, the per-service
// choice tables (random or Maglev, computed here), the reverse-translation
// LRU and the per-CPU counters.
//
// A process in the cgroup that connects (TCP, connected UDP) or sends a
// datagram to a VIP has its destination rewritten to a backend inside the
// syscall, before a packet exists; getpeername and recvfrom report the VIP
// back. Changes (AddService, AddBackends, DrainBackends, RemoveBackends,
// RemoveService) are validated whole against the resulting configuration
// before any map is written: a refused change changes nothing.
//
// Cgroup v2 is required by the programs. On a host that mounts only cgroup
// v1, MountCgroup2 mounts a private cgroup2 hierarchy (the kernel always
// has one) to attach to.
//
// It must not touch the shield's XDP program or maps (shield/), nor any
// cgroup but the one it is given.
package lb
