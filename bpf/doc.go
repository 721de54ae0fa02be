// Package bpf holds the C sources of every eBPF program of xdpshield and the
// Go bindings bpf2go generates from them (committed, so building needs no
// clang; `make generate` rebuilds them).
//
// The numbers shield.c shares with user space are named C enums that
// bpf2go emits as Go constants (-type, gen.go); shield/ derives its own
// from them rather than copying them.
//
// It owns nothing at run time: shield/ loads and owns the XDP programs and
// their maps, l7/ the L7 fast path's (l7.c).
package bpf
