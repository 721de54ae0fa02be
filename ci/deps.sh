#!/usr/bin/env bash
# Installs the Debian packages the build, the tests, the demo and the VM matrix
# need, only those missing. Safe to run again; changes nothing when all are there.
set -euo pipefail

pkgs=(
	clang-14 llvm-14 libbpf-dev # make generate (bpf2go; the pinned compiler, bpf/gen.go)
	iproute2 iputils-ping     # namespaces, veths
	qemu-system-x86 busybox-static cpio zstd xz-utils lz4 # the VM matrix
	prometheus               # promtool, to check /metrics
	tcpdump                  # reading failure pcaps
	docker.io                # the container lane (dockerd 20.10, started by the test)
	nftables                 # shield nft -apply, its test, the study's baseline, the balancer's DNAT comparison
	gnuplot-nox              # the study's plots (shieldlab study)
	shellcheck               # make lint: actionlint checks the workflow's scripts with it
	haproxy nginx-light xdp-tools # the study's peers (issue 31): L7 proxies, xdp-filter
	systemd-container        # systemd-nspawn: dist/systemd's unit under a real systemd
	chromium fonts-dejavu-core # the workbench's browser test (workbench/browser_test.go)
	ipvsadm                  # the balancer study's IPVS row (xdplb TestCompareBalancers, in a VM)
)
# Hosted CI installs each job's packages itself (.github/workflows/ci.yml).
if [ "${SHIELD_SKIP_DEPS:-}" = 1 ]; then
	exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing packages ${missing[*]}; run as root to install them" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
