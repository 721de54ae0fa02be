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
// StartPinned pins the links and maps in a directory of the service's pin
// directory (lbpin.Subdir), so the balancer keeps translating while no
// process holds it, and a later start adopts them: maps reused, links
// given the new programs, the configured services applied whole
// (ReplaceServices). The Go side's bookkeeping rides in the backends'
// padding bytes (service id, draining), so the services can be read back
// from the maps. lbpin.Remove takes a pinned balancer away.
//
// Cgroup v2 is required by the programs. On a host that mounts only cgroup
// v1, cgroup2.Mount mounts a private cgroup2 hierarchy (the kernel always
// has one) to attach to.
//
// Its parts live beside it: the model, configuration and validation rules
// (lbconf), the choice tables' Maglev builder (maglev), the cgroup v2
// plumbing (cgroup2), the pin directory's layout and removal (lbpin), the
// active health checks (health) and the destruction of removed backends'
// sockets (sockdestroy). This package ties them to the programs: it alone
// loads bpf/lb.c, attaches it and writes its maps.
//
// It must not touch the shield's XDP program or maps (shield/), nor any
// cgroup but the one it is given.
package lb
