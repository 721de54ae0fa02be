// Package broken is the VM harness's deliberately broken program: a tiny
// XDP program, assembled with cilium/ebpf/asm (no clang), that calls
// bpf_ktime_get_coarse_ns, a helper added in Linux 5.11, without probing
// for it. It loads and runs on 5.11+ and must fail on 5.10 with the
// verifier's "unknown func" error; vmtest's TestBrokenProgramOn510 checks
// that the matrix shows that failure, readable.
//
// It lives under testdata/ so `go test ./...` skips it; vmtest builds it by
// its path.
package broken
