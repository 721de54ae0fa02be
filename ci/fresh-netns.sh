#!/usr/bin/env bash
# Runs a command as a freshly booted machine would see /run/netns: in a
# private mount namespace in which /run/netns is unmounted until it is a
# plain directory again (iproute2 makes it a shared bind mount of itself on
# its first `ip netns add`; a fresh boot has none). The host's mounts are not
# touched: the unmounts happen in the private copy only.
#   ci/fresh-netns.sh make test
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 command [args...]" >&2; exit 2; }
exec unshare --mount --propagation private -- bash -c '
  set -euo pipefail
  mkdir -p /run/netns
  while mountpoint -q /run/netns; do umount -l /run/netns; done
  # Namespace files left by a mount that is now gone are plain files; the
  # suites create their own names, so leave them.
  echo "fresh-netns: /run/netns is a plain directory in this mount namespace" >&2
  exec "$@"
' fresh-netns "$@"
