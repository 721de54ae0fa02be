// Package pinfs holds what the shield and the balancer both do to their pin
// directories on bpffs: tell bpffs from another filesystem, and remove only
// the pins a package owns. It touches nothing but the paths it is given.
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

// RemoveOwned removes from dir the entries named in owned (files, never
// directories), then dir when nothing else is left in it. Anything else is
// left where it is and named in the error, as not owner's pins.
func RemoveOwned(dir string, owned map[string]bool, owner string) error {
	entries, err := os.ReadDir(dir)
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
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("remove pin: %w", err))
		}
	}
	if len(foreign) > 0 {
		errs = append(errs, fmt.Errorf("left %s in %s: not the %s's pins", strings.Join(foreign, ", "), dir, owner))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
