// Package bpf holds the C sources of every eBPF program of xdpshield and the
// Go bindings bpf2go generates from them (committed, so building needs no
// clang; `make generate` rebuilds them).
//
// It owns nothing at run time: shield/ loads and owns the programs and maps.
package bpf
