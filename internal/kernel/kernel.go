// Package kernel reads the running kernel's release, for reports and for
// the version checks of features that depend on it.
package kernel

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Release is the running kernel's `uname -r`, or "unknown".
func Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Version parses the major and minor numbers that start a release
// ("6.12.117+deb13-cloud-amd64" is 6, 12); ok is false when rel does not
// start with them.
func Version(rel string) (major, minor int, ok bool) {
	n, _ := fmt.Sscanf(rel, "%d.%d", &major, &minor)
	return major, minor, n == 2
}

// AtLeast reports whether the running kernel is at least major.minor; an
// unreadable release is not.
func AtLeast(major, minor int) bool {
	ma, mi, ok := Version(Release())
	return ok && (ma > major || (ma == major && mi >= minor))
}
