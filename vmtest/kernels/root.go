package kernels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ModuleRoot finds the directory holding go.mod, from dir upwards.
func ModuleRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("no go.mod above " + dir)
		}
		d = parent
	}
}

// LoadLock reads the lock file of the module holding dir.
func LoadLock(dir string) (*Lock, string, error) {
	root, err := ModuleRoot(dir)
	if err != nil {
		return nil, "", fmt.Errorf("find the kernel lock: %w", err)
	}
	path := filepath.Join(root, DefaultLockPath)
	l, err := ReadLock(path)
	return l, root, err
}
