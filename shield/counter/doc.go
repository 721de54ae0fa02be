// Package counter holds the shield's packet counter types: Verdict, Reason
// and Proto (the C enums' values as bpf2go emits them, with their metric
// label names) and Counters, the counts by verdict, reason and protocol
// summed over CPUs, with the map key formula (Index, Keys) of account() in
// bpf/shield.c.
//
// It is pure: it reads no map and loads nothing (package shield reads the
// counters map into Counters); it imports only package bpf's constants.
package counter
