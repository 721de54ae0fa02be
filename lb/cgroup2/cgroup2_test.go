package cgroup2

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFindCgroup2 compares Find with util-linux's findmnt, a
// reader of /proc/self/mountinfo we did not write: the first cgroup2
// mount of the hierarchy's root.
func TestFindCgroup2(t *testing.T) {
	findmnt, err := exec.LookPath("findmnt")
	if err != nil {
		t.Skip("findmnt (util-linux) is missing: nothing to compare with")
	}
	out, err := exec.Command(findmnt, "-n", "-l", "-t", "cgroup2", "-o", "FSROOT,TARGET").Output()
	require.NoError(t, err)
	want := ""
	for _, l := range strings.Split(string(out), "\n") {
		if root, target, ok := strings.Cut(strings.TrimSpace(l), " "); ok && root == "/" {
			want = strings.TrimSpace(target)
			break
		}
	}
	got, err := Find()
	require.NoError(t, err)
	require.Equal(t, want, got, "Find() (findmnt -t cgroup2: %q)", out)
}
