#!/usr/bin/env bash
# Installs the Debian packages the build, the tests, the demo and the VM matrix
# need, only those missing. Safe to run again; changes nothing when all are there.
set -euo pipefail

pkgs=(
	clang llvm libbpf-dev    # make generate (bpf2go)
	iproute2 iputils-ping     # namespaces, veths
	qemu-system-x86 busybox-static cpio zstd xz-utils lz4 # the VM matrix
	prometheus               # promtool, to check /metrics
	tcpdump                  # reading failure pcaps
	nftables                 # shield nft -apply, its test, the study's nftables baseline
	gnuplot-nox              # the study's plots (shield study)
)
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
