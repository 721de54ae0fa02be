package lb

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultCgroup2Mount is where Cgroup2Root mounts a private cgroup2
// hierarchy when the host has none mounted.
const DefaultCgroup2Mount = "/run/xdpshield/cgroup2"

// FindCgroup2 returns the mount point of a cgroup v2 hierarchy from
// /proc/self/mountinfo, if one is mounted ("" if none).
func FindCgroup2() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) >= 5 && len(qf) >= 1 && qf[0] == "cgroup2" && pf[3] == "/" {
			return unescapeMount(pf[4]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	return "", nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
