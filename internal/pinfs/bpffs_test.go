package pinfs

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPrivateMountNS (issue 25, finding 5): the `ip netns exec` guard
// fails closed. Started detached under `ip netns exec`, serve could not
// read the reference mount namespace (init's), took that for "not
// private", mounted bpffs in the throwaway namespace and lost its pins
// on exit.
func TestPrivateMountNS(t *testing.T) {
	// A parent of its own: under the VMs' init the test's parent is pid
	// 1, which would make the table's parent init.
	const parent = 4242
	ppid := strconv.Itoa(parent)
	denied := errors.New("permission denied")
	for _, tc := range []struct {
		name    string
		ns      map[string]string // pid -> namespace; absent: unreadable
		private bool
		wantErr bool
	}{
		{"init's unreadable", map[string]string{"self": "mnt:[2]", ppid: "mnt:[2]"}, false, true},
		{"own unreadable", map[string]string{"1": "mnt:[1]", ppid: "mnt:[1]"}, false, true},
		{"init's differs", map[string]string{"self": "mnt:[2]", "1": "mnt:[1]", ppid: "mnt:[2]"}, true, false},
		{"parent's differs", map[string]string{"self": "mnt:[2]", "1": "mnt:[2]", ppid: "mnt:[3]"}, true, false},
		{"parent gone", map[string]string{"self": "mnt:[1]", "1": "mnt:[1]"}, false, false},
		{"the host's", map[string]string{"self": "mnt:[1]", "1": "mnt:[1]", ppid: "mnt:[1]"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := func(pid string) (string, error) {
				if s, ok := tc.ns[pid]; ok {
					return s, nil
				}
				return "", denied
			}
			got, err := privateMountNS(read, parent)
			assert.Equal(t, tc.private, got, "privateMountNS = %v, %v; want %v, error %v", got, err, tc.private, tc.wantErr)
			assert.Equal(t, tc.wantErr, err != nil, "privateMountNS = %v, %v; want %v, error %v", got, err, tc.private, tc.wantErr)
		})
	}
	// And this process's own answer, from /proc: where init's namespace
	// cannot be read (this sandbox: pid 1 is not ptrace-readable), an
	// error; else none.
	_, refErr := mountNS("1")
	_, err := privateMountNS(mountNS, os.Getppid())
	assert.Equal(t, refErr != nil, err != nil,
		"privateMountNS(mountNS) here = %v, with init's namespace read as %v: want an error exactly when it cannot be read", err, refErr)
	t.Logf("here: init's mount namespace read: %v; privateMountNS error: %v", refErr, err)
}
