package config

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PortRange
		ok   bool
	}{
		{"32768\t60999\n", PortRange{32768, 60999}, true}, // Linux's default, as the sysctl prints it
		{"1024 1024", PortRange{1024, 1024}, true},
		{"60999 32768", PortRange{}, false},
		{"0 100", PortRange{}, false},
		{"1 65536", PortRange{}, false},
		{"32768", PortRange{}, false},
	} {
		got, err := parsePortRange(tc.in)
		if !tc.ok {
			assert.Error(t, err, "parsePortRange(%q)", tc.in)
			continue
		}
		require.NoError(t, err, "parsePortRange(%q)", tc.in)
		assert.Equal(t, tc.want, got, "parsePortRange(%q)", tc.in)
	}
}

// TestLocalPortRangeOfNamespace: LocalPortRange answers for the network
// namespace of the calling thread (the edge's, where the service runs),
// not the machine's first one.
func TestLocalPortRangeOfNamespace(t *testing.T) {
	testutil.Root(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	require.NoError(t, err)
	defer orig.Close()
	outside, err := LocalPortRange()
	require.NoError(t, err)

	ns, err := netns.New() // and enters it
	require.NoError(t, err)
	defer func() {
		require.NoError(t, netns.Set(orig))
		ns.Close()
	}()
	want := PortRange{20000, 20999}
	if want == outside {
		want = PortRange{21000, 21999}
	}
	require.NoError(t, os.WriteFile(localPortRangePath, []byte(fmt.Sprintf("%d %d", want.Lo, want.Hi)), 0))
	got, err := LocalPortRange()
	require.NoError(t, err)
	assert.Equal(t, want, got, "LocalPortRange() inside a namespace whose range was set")
	require.NoError(t, netns.Set(orig))
	got, err = LocalPortRange()
	require.NoError(t, err)
	assert.Equal(t, outside, got, "LocalPortRange() back outside")
}
