#!/usr/bin/env bash
# The multi-kernel VM matrix and the regression gate as CI runs them, in one
# boot per kernel: the simulator, storm (short), shield, socket balancer,
# topology and L7 suites in qemu on every kernel pinned in fixtures/kernels.lock
# (override with
# KERNELS="5.10 7.2"), plus the gate's own runs (the shield's data-plane
# tests, shield/datapath, again with shield_compat, and the complexity and
# speed measurement), and the gate's host runs (HOST_PKGS, the Makefile's
# GATE_PKGS) beside them, compared with fixtures/gate/baseline.json. Two
# kernels boot at once (VMS=2: a TCG VM keeps one of the 2 cores busy);
# KERNELS is in that order, the longest (5.10) first. Kernels are cached
# outside the clone ($XDPSHIELD_CACHE, else ~/.cache/xdpshield); results go
# to out/vmtest/matrix.{txt,json} and out/gate/gate.{txt,json}. Exits 0 when
# the gate passes, 1 when a figure regressed or a test failed, 2 when it
# could not run (vmtest/doc.go for the harness's own codes).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
KERNELS="${KERNELS:-5.10 6.1 6.12 7.2}"
PKGS="${VMTEST_PKGS:-./sim/... ./e2e/... ./shield/... ./api ./service ./nft ./lb/... ./internal/topo/... ./internal/pinfs ./internal/testutil ./l7/... ./xdplb}"
# The gate's behaviour packages on the host: the Makefile's GATE_PKGS.
HOST_PKGS="${GATE_PKGS:-./sim ./shield ./shield/datapath}"

start=$(date +%s)
go build -o out/bin/vmtest ./vmtest/cmd/vmtest
rc=0
out/bin/vmtest gate -kernels "$KERNELS" -vms "${VMS:-2}" -timeout 20m -testflags "-test.short -test.v -test.timeout=10m" \
	-host-packages "$HOST_PKGS" -matrix-out out/vmtest -out out/gate $PKGS || rc=$?
echo "vmtest: matrix and gate on $KERNELS and the host took $(( $(date +%s) - start ))s (exit $rc)"
exit "$rc"
