package pinfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bpffsMount is where bpffs is mounted when nothing is.
const bpffsMount = "/sys/fs/bpf"

// EnsureBPFFS makes sure dir (created if missing) lives on a bpf filesystem,
// mounting one on /sys/fs/bpf when dir is below it and nothing is mounted
// there: the only change the service makes outside its pin directory.
func EnsureBPFFS(dir string) error {
	// The nearest existing ancestor tells which filesystem dir would be on.
	p := filepath.Clean(dir)
	for {
		if _, err := os.Stat(p); err == nil {
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	ok, err := OnBPFFS(p)
	if err != nil {
		return err
	}
	if !ok {
		clean := filepath.Clean(dir)
		if clean != bpffsMount && !strings.HasPrefix(clean, bpffsMount+"/") {
			return fmt.Errorf("%s is not on a bpf filesystem", dir)
		}
		// A bpffs mounted in a private mount namespace (`ip netns exec`
		// makes one) dies with it, and the pinned link with it: the
		// program would be detached when the service stops.
		private, err := privateMountNS(mountNS, os.Getppid())
		if err != nil {
			return fmt.Errorf("no bpffs on %s, and no telling whether this mount namespace is private (ip netns exec?), "+
				"where a bpffs mounted now would vanish with the service, detaching the program: %w; "+
				"mount a bpffs on %s first or give a pin root on one", bpffsMount, err, bpffsMount)
		}
		if private {
			return fmt.Errorf("no bpffs on %s in this private mount namespace (ip netns exec?): pins made here would vanish, "+
				"detaching the program, when the service exits; enter only the network namespace "+
				"(nsenter --net=/run/netns/NAME keeps the host's mounts) or give a pin root on a bpffs that outlives the service", bpffsMount)
		}
		if err := unix.Mount("bpf", bpffsMount, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs on %s: %w", bpffsMount, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

// privateMountNS reports whether this process runs in a mount namespace
// other than init's or its parent's: one made for it, that dies with it.
// Init's is the reference: when it (or this process's own) cannot be read
// the answer is an error, never "not private" (a detached service under
// `ip netns exec` whose reference could not be read mounted bpffs in the
// throwaway namespace and lost its pins). A parent gone is no answer.
func privateMountNS(read func(pid string) (string, error), ppid int) (bool, error) {
	self, err := read("self")
	if err != nil {
		return false, fmt.Errorf("read this process's mount namespace: %w", err)
	}
	ref, err := read("1")
	if err != nil {
		return false, fmt.Errorf("read init's mount namespace, the reference: %w", err)
	}
	if ref != self {
		return true, nil
	}
	if ppid > 1 {
		if ns, err := read(strconv.Itoa(ppid)); err == nil && ns != self {
			return true, nil
		}
	}
	return false, nil
}

// mountNS names the mount namespace of pid ("self" or a number).
func mountNS(pid string) (string, error) {
	s, err := os.Readlink("/proc/" + pid + "/ns/mnt")
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", fmt.Errorf("/proc/%s/ns/mnt: empty link", pid)
	}
	return s, nil
}
