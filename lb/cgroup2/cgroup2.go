package cgroup2

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// DefaultMount is where Root mounts a private cgroup2
// hierarchy when the host has none mounted.
const DefaultMount = "/run/xdpshield/cgroup2"

// Find returns the mount point of a cgroup v2 hierarchy, if one is
// mounted ("" if none): the first cgroup2 mount of its root, from
// /proc/self/mountinfo (moby/sys/mountinfo, which undoes its octal
// escapes).
func Find() (string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	for _, m := range ms {
		if m.Root == "/" {
			return m.Mountpoint, nil
		}
	}
	return "", nil
}

// Mount mounts the cgroup v2 hierarchy on dir (created if missing).
// The kernel has exactly one v2 hierarchy: a host that mounts only cgroup v1
// still has it, with no controllers, and BPF programs attach to it all the
// same.
func Mount(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount cgroup2 on %s: %w", dir, err)
	}
	return nil
}

// Root returns a mounted cgroup v2 hierarchy: the host's when it has
// one, else a private one mounted on fallback (mounted reports that, so the
// caller may unmount it).
func Root(fallback string) (root string, mounted bool, err error) {
	root, err = Find()
	if err != nil || root != "" {
		return root, false, err
	}
	if err := Mount(fallback); err != nil {
		return "", false, err
	}
	return fallback, true, nil
}

// Check returns an error unless dir is a directory of a cgroup v2
// hierarchy.
func Check(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("cgroup %q: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("cgroup %q: not a cgroup v2 directory (mount one with cgroup2.Mount)", dir)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("cgroup %q: not a directory", dir)
	}
	return nil
}

// CheckPath refuses a cgroup that would balance what it should not: the
// hierarchy's root (every process on the host), a path climbing out of it,
// or an absolute path not on a cgroup v2 hierarchy. What it can tell
// without creating anything, so `-check` says it too.
func CheckPath(cg string) error {
	if cg == "" {
		return errors.New("empty (the cgroup v2 directory to balance)")
	}
	clean := filepath.Clean(cg)
	if !filepath.IsAbs(cg) {
		switch {
		case clean == ".":
			return fmt.Errorf("%q is the cgroup2 root: every process on the host would be balanced; name a directory below it", cg)
		case clean == ".." || strings.HasPrefix(clean, "../"):
			return fmt.Errorf("%q climbs out of the cgroup2 hierarchy", cg)
		}
		return nil
	}
	// The nearest existing directory tells the filesystem.
	p := clean
	for {
		if _, err := os.Stat(p); err == nil {
			break
		}
		p = filepath.Dir(p)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return fmt.Errorf("%q: %w", cg, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%q is not on a cgroup v2 hierarchy", cg)
	}
	if p == clean && isMountRoot(clean) {
		return fmt.Errorf("%q is a cgroup2 root: every process on the host would be balanced; name a directory below it", cg)
	}
	return nil
}

// isMountRoot reports whether dir is the root of a mounted filesystem (its
// parent is on another device, or it is /).
func isMountRoot(dir string) bool {
	var a, b unix.Stat_t
	if unix.Stat(dir, &a) != nil || unix.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev || dir == "/"
}

// ID is the id of a cgroup v2 directory: its inode number (what a cgroup
// link's info names).
func ID(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return st.Ino, nil
}
