// Package bpf holds the C sources of every eBPF program of xdpshield and the
// Go bindings bpf2go generates from them (committed, so building needs no
// clang; `make generate` rebuilds them).
//
// The numbers shield.c shares with user space are named C enums that
// bpf2go emits as Go constants (-type, gen.go); shield/ derives its own
// from them rather than copying them.
//
// Load is the one loading path of these programs: a collection spec with
// its `const volatile` load-time switches set by name, on a copy, and on a
// verifier refusal the verifier's whole log (still an *ebpf.VerifierError
// for errors.As, so a loader can fall back to another variant). shield/,
// l7/, probe/ and e2e/storm's generator load through it.
//
// It owns nothing at run time: shield/ loads and owns the XDP programs and
// their maps, l7/ the L7 fast path's (l7.c), probe/ the tc probe's, lb/ the
// socket balancer's; sim/ runs loaded programs and knows none of them.
// walk.c holds walks of shield's sources table inside the kernel that
// only shield's BenchmarkTop loads, as references for the service's walk.
package bpf
