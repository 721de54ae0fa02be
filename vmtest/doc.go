// Package vmtest boots the Debian kernels pinned in fixtures/kernels.lock
// under qemu and runs the repository's test binaries inside them: the
// multi-kernel matrix that turns "works on 5.10 and up" into a test result.
//
// It owns the kernel cache (outside the repository: $XDPSHIELD_CACHE, else
// $XDG_CACHE_HOME/xdpshield or ~/.cache/xdpshield), the private apt
// configuration that fills it (its own sources list, state and cache
// directories; the machine's /etc/apt and apt state are never read for
// sources nor written), the initramfs it builds per run and the qemu
// processes it starts, one at a time (a file lock in the cache serialises VMs
// across processes).
//
// It must not touch the host's network namespaces, modules or apt setup: all
// privileged work happens inside the guest.
//
// Exit codes of the commands built on it (see ExitCode):
//
//	0 pass, 1 test failure, 2 harness error, 3 kernel panic,
//	4 boot timeout, 5 run timeout (VM killed past its budget).
package vmtest
