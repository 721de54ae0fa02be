package lb

import (
	"fmt"
	"os"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// DefaultCgroup2Mount is where Cgroup2Root mounts a private cgroup2
// hierarchy when the host has none mounted.
const DefaultCgroup2Mount = "/run/xdpshield/cgroup2"

// FindCgroup2 returns the mount point of a cgroup v2 hierarchy, if one is
// mounted ("" if none): the first cgroup2 mount of its root, from
// /proc/self/mountinfo (moby/sys/mountinfo, which undoes its octal
// escapes).
func FindCgroup2() (string, error) {
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

// MountCgroup2 mounts the cgroup v2 hierarchy on dir (created if missing).
// The kernel has exactly one v2 hierarchy: a host that mounts only cgroup v1
// still has it, with no controllers, and BPF programs attach to it all the
// same.
func MountCgroup2(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount cgroup2 on %s: %w", dir, err)
	}
	return nil
}

// Cgroup2Root returns a mounted cgroup v2 hierarchy: the host's when it has
// one, else a private one mounted on fallback (mounted reports that, so the
// caller may unmount it).
func Cgroup2Root(fallback string) (root string, mounted bool, err error) {
	root, err = FindCgroup2()
	if err != nil || root != "" {
		return root, false, err
	}
	if err := MountCgroup2(fallback); err != nil {
		return "", false, err
	}
	return fallback, true, nil
}
