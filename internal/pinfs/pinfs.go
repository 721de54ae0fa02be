// Package pinfs holds what the shield and the balancer both do to their pin
// directories on bpffs: tell bpffs from another filesystem, make sure a
// pin root is on one (EnsureBPFFS), and remove only the pins a package
// owns. It touches nothing but the paths it is given, except that
// EnsureBPFFS mounts a bpffs on /sys/fs/bpf when nothing is mounted there
// (and never in a private mount namespace, where it would vanish).
package pinfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// OnBPFFS reports whether path lives on a bpf filesystem.
func OnBPFFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Type == unix.BPF_FS_MAGIC, nil
}

// CheckRoot refuses a pin root another user could have made or could
// change (issue 23, finding 6: on a 1777 bpffs an unprivileged user made
// the root first and moved the shield's directory away): root must be a
// directory, not a symlink, owned by root or by this process's user and
// writable by no one else; every directory above it must not be a
// symlink, and one others may write must be sticky (no one else may
// rename what lies in it).
func CheckRoot(root string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("pin root %s: %w", root, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); err != nil {
		return fmt.Errorf("pin root: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("pin root %s is not a directory (a symlink?)", abs)
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("pin root %s belongs to uid %d, not to root or uid %d: another user made it; remove it", abs, st.Uid, os.Geteuid())
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("pin root %s has mode %04o: others may write it; chmod 700 it", abs, st.Mode&0o7777)
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("pin root: %w", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("pin root %s: %s is not a directory (a symlink?)", abs, p)
		}
		if st.Mode&0o002 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return fmt.Errorf("pin root %s: %s has mode %04o: anyone may rename what is in it", abs, p, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
	}
}

// OpenDir opens the directory path without following a symlink in any
// of its components (O_NOFOLLOW per component, which every kernel has):
// a link planted below a pin root must not lead a removal elsewhere
// (issue 23, finding 6).
func OpenDir(path string) (*os.File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /: %w", err)
	}
	walked := ""
	for _, c := range strings.Split(strings.TrimPrefix(abs, "/"), "/") {
		if c == "" {
			continue
		}
		walked += "/" + c
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return nil, fmt.Errorf("%s is a symlink or not a directory: not followed", walked)
			}
			return nil, &os.PathError{Op: "open", Path: walked, Err: err}
		}
		fd = nfd
	}
	return os.NewFile(uintptr(fd), abs), nil
}

// RemoveOwned removes from dir the entries named in owned (files, never
// directories), then dir when nothing else is left in it. Anything else is
// left where it is and named in the error, as not owner's pins. No
// symlink is followed on the way to dir (OpenDir), and what is removed is
// removed relative to the directory opened.
func RemoveOwned(dir string, owned map[string]bool, owner string) error {
	dir = filepath.Clean(dir)
	parent, err := OpenDir(filepath.Dir(dir))
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	defer parent.Close()
	fd, err := unix.Openat(int(parent.Fd()), filepath.Base(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("%s is a symlink or not a directory: not followed, nothing removed", dir)
		}
		return fmt.Errorf("read %s: %w", dir, err)
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	var errs []error
	var foreign []string
	for _, e := range entries {
		if !owned[e.Name()] || e.IsDir() {
			foreign = append(foreign, e.Name())
			continue
		}
		if err := unix.Unlinkat(int(d.Fd()), e.Name(), 0); err != nil {
			errs = append(errs, fmt.Errorf("remove pin %s: %w", filepath.Join(dir, e.Name()), err))
		}
	}
	if len(foreign) > 0 {
		errs = append(errs, fmt.Errorf("left %s in %s: not the %s's pins", strings.Join(foreign, ", "), dir, owner))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := unix.Unlinkat(int(parent.Fd()), filepath.Base(dir), unix.AT_REMOVEDIR); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
