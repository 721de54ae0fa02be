// Package cgroup2 finds, mounts and checks cgroup v2 directories for the
// socket balancer (lb), whose programs attach to one: the host's cgroup2
// hierarchy when it has one mounted, else the kernel's (always present,
// with no controllers on a cgroup v1 host) mounted privately (Root,
// DefaultMount); Check and CheckPath refuse what is not a cgroup v2
// directory or would balance every process on the host; ID is a
// directory's cgroup id.
//
// It owns no BPF object and attaches nothing; it mounts only when asked
// (Mount, Root) and never creates, moves processes into or removes a
// cgroup.
package cgroup2
