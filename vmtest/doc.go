// Package vmtest boots the Debian kernels pinned in fixtures/kernels.lock
// under qemu and runs the repository's test binaries inside them: the
// multi-kernel matrix that turns "works on 5.10 and up" into a test result.
//
// # Commands
//
//	make vmtest KERNELS="5.10 6.1 6.12 7.2"   # the matrix; out/vmtest/matrix.{txt,json}
//	make vmtest KERNELS=5.10 VMTEST_PKGS=./sim/...
//	make kernels-repin                         # rewrite the lock from the archive
//	make gate                                  # the regression gate (github.com/xdpshield/xdpshield/vmtest/gate): Matrix.Extra runs
//	CGO_ENABLED=0 go test -exec 'go run github.com/xdpshield/xdpshield/vmtest/cmd/vmexec -kernel 6.1' ./sim/...
//	go run ./vmtest/cmd/vmtest fetch -kernels 7.2   # download and verify only
//
// In -exec mode go test runs the command in each package's directory, so
// vmexec is named by import path. go run reports every failure as exit
// status 1 (go test only needs non-zero); build vmexec to see the distinct
// codes below, or read out/vmtest/exit-code after a matrix. CGO_ENABLED=0 gives static binaries; a
// dynamic one still runs (its libraries are copied in).
//
// # What a boot is
//
// The kernels themselves (the lock, fetching through a private apt
// configuration, the hashes, the modules) are vmtest/kernels'.
//
// The initramfs (newc cpio, written here) holds busybox-static, the modules
// of DefaultModules with their dependencies (depends= of each module's
// .modinfo, what depmod writes to modules.dep; .ko.xz/.ko.zst are
// decompressed with the xz/zstd tools), the host tools of DefaultTools with
// their shared libraries, the test binaries, and mirrors of the packages'
// testdata/ and of fixtures/. Its /init mounts proc, sysfs, devtmpfs, bpffs,
// cgroup2, debugfs and tracefs, checks `uname -r` against the pin, loads the
// modules, sets SHIELD_REQUIRE_PRIV=1 (and VMTEST=1, VMTEST_KERNEL=<name>,
// VMTEST_ACCEL=kvm|tcg, for timing budgets that must widen under emulation)
// and runs each binary in its package directory. It reports the guest's
// uptime at each step (PHASE lines: /init started, mounted, modules
// loaded, first test), which the matrix shows as the boot's phases. qemu
// runs with KVM when a trial boot shows it works (VMTEST_ACCEL forces kvm or
// tcg), TCG otherwise, 2 vCPUs, machine pc; the kernel console
// goes to ttyS0 (a file, dumped on a panic or a timeout, live with -v), the
// test output to ttyS1 (streamed live, framed by @@VMTEST markers).
//
// # Exit codes
//
//	0 pass, 1 test failure, 2 harness error, 3 kernel panic,
//	4 boot timeout (init never reported), 5 run timeout (VM killed past its budget).
//
// It owns the kernel cache (outside the repository: $XDPSHIELD_CACHE, else
// $XDG_CACHE_HOME/xdpshield or ~/.cache/xdpshield) and the qemu processes it
// starts, one at a time unless Matrix.VMs (-vms) allows more: a file lock
// in the cache (vm.lock, and vm.lock.N for the N-th slot; LockSlot) bounds
// the VMs across the processes that use as many slots (vmexec and a matrix
// of one VM take vm.lock alone), so `go test -exec` over several packages
// queues them; the gate's host runs take a slot too.
// Under TCG a VM runs on one host thread, so two fill a 2-core host. It
// must not touch the host's network namespaces, modules or apt setup: all
// privileged work happens inside the guest.
package vmtest
