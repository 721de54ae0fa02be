// Package kernels is the VM matrix's supply of kernels: the lock file
// (fixtures/kernels.lock), fetching and verifying what it pins, the
// modules a boot loads, and the boot image qemu takes. vmtest boots them.
//
// The lock pins, per kernel, the Debian suite, the packages (with the sha256
// of each .deb) and the kernel image inside them (with its sha256). Fetch
// downloads what the cache lacks with `apt-get download` through a private
// apt configuration (APT_CONFIG pointing at its own sources list, state and
// cache under the cache directory; /etc/apt and /var/lib/apt are neither
// read for sources nor written), verifies every hash, and extracts the image
// and modules. When the machine's archive keyring cannot verify a suite, a
// newer debian-archive-keyring package is fetched through the stable suites
// into the cache (nothing is installed). A pin the archive no longer serves
// fails naming the package and `make kernels-repin`.
//
// It owns the kernel cache (outside the repository: $XDPSHIELD_CACHE, else
// $XDG_CACHE_HOME/xdpshield or ~/.cache/xdpshield) and never touches the
// host's apt setup.
package kernels
