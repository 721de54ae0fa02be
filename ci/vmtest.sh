#!/usr/bin/env bash
# The multi-kernel VM matrix as CI runs it: the simulator, storm (short),
# shield, socket balancer and topology suites in qemu on every kernel pinned in
# fixtures/kernels.lock (override with KERNELS="5.10 7.2"). Kernels are cached
# outside the clone ($XDPSHIELD_CACHE, else ~/.cache/xdpshield); results go
# to out/vmtest/matrix.{txt,json}. Exits with the harness's code (make would
# turn it into 2): 1 test failure, 2 harness error, 3 kernel panic, 4 boot
# timeout, 5 run timeout (vmtest/doc.go).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
KERNELS="${KERNELS:-5.10 6.1 6.12 7.2}"

start=$(date +%s)
rm -f out/vmtest/exit-code
rc=0
make vmtest KERNELS="$KERNELS" || rc=$(cat out/vmtest/exit-code 2>/dev/null || echo 2)
echo "vmtest: matrix on $KERNELS took $(( $(date +%s) - start ))s (exit $rc)"
exit "$rc"
