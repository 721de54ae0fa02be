// Package lbconf is the socket balancer's model: what a service is
// (ServiceKey: VIP, port and protocol; its Mode, Backends with their
// weights and draining, source ranges, affinity and HealthCheck), the
// [lb] section of `shield serve`'s configuration (Config), the parsers of
// what operators write (ParseServiceKey, ParseWeighted, ParsePrefixes,
// ParseBackends), and the rules a configuration must satisfy: one service
// on its own (ValidateService, ValidateShape, ValidateHealth) and the
// whole set (ValidateSet), with the bounds the programs' maps impose
// (MaxServices, MaxBackends, TableSlots, MaxServiceBackends).
//
// Package lb validates every change with these rules before it writes a
// map; api and cmd/shield parse and print with them.
//
// It loads no program and touches no map: everything here is pure Go,
// testable without privileges, except Config.CgroupDir, which resolves the
// configured cgroup through package cgroup2 (creating the directory, and
// mounting a private cgroup2 hierarchy when the host has none).
package lbconf
