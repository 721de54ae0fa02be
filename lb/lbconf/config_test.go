package lbconf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/cgroup2"
)

func TestConfig(t *testing.T) {
	const good = `
cgroup = "edge"
reverse_size = 4096
[[service]]
vip = "198.18.1.1"
port = 80
mode = "maglev"
backends = ["198.18.2.1:8080", "198.18.2.2:8080"]
[[service]]
vip = "2001:db8:1::1"
port = 53
protocol = "udp"
backends = ["[2001:db8:2::1]:53"]
`
	var c Config
	_, err := toml.Decode(good, &c)
	require.NoError(t, err)
	svcs, err := c.Services()
	require.NoError(t, err, "Services()")
	assert.False(t, len(svcs) != 2 || svcs[0].Mode != Maglev || svcs[1].Proto != UDP || svcs[1].Mode != Random || len(svcs[0].Backends) != 2, "Services() = %+v, want the two services as written (defaults: random)", svcs)

	for _, tc := range []struct {
		name, entry, want string
	}{
		{"bad VIP", `vip = "198.18.1.300"
port = 80
backends = ["198.18.2.1:80"]`, `lb.service[0]: vip: ParseAddr("198.18.1.300")`},
		{"bad port", `vip = "198.18.1.1"
port = 70000
backends = ["198.18.2.1:80"]`, "lb.service[0]: port: 70000 out of range"},
		{"zero backends", `vip = "198.18.1.1"
port = 80`, "lb.service[0]: service tcp/198.18.1.1:80: zero backends"},
		{"bad backend", `vip = "198.18.1.1"
port = 80
backends = ["198.18.2.1"]`, `backend "198.18.2.1"`},
		{"duplicate backend", `vip = "198.18.1.1"
port = 80
backends = ["198.18.2.1:80", "198.18.2.1:80"]`, "duplicate backend 198.18.2.1:80"},
		{"VIP is a backend", `vip = "198.18.2.1"
port = 80
backends = ["198.18.2.1:8080"]`, "VIP 198.18.2.1 is a backend address of service tcp/198.18.2.1:80"},
		{"unknown mode", `vip = "198.18.1.1"
port = 80
mode = "rr"
backends = ["198.18.2.1:80"]`, `unknown mode "rr"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			_, err := toml.Decode("[[service]]\n"+tc.entry, &c)
			require.NoError(t, err)
			_, err = c.Services()
			assert.False(t, err == nil || !strings.Contains(err.Error(), tc.want), "Services() error = %v, want one containing %q", err, tc.want)
		})
	}
}

// TestConfigCgroup (issue 25, finding 6): a cgroup that would balance the
// whole host, or is no cgroup v2 directory, fails -check (Services).
// Before, ".", the cgroup2 root and /tmp passed.
func TestConfigCgroup(t *testing.T) {
	testutil.Root(t)
	mnt := t.TempDir()
	require.NoError(t, cgroup2.Mount(mnt))
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	for _, tc := range []struct {
		cgroup, want string // want "": accepted
	}{
		{".", "is the cgroup2 root"},
		{"./", "is the cgroup2 root"},
		{"..", "climbs out"},
		{"a/../../b", "climbs out"},
		{"/tmp", "not on a cgroup v2 hierarchy"},
		{"/tmp/xdpshield-nothing/here", "not on a cgroup v2 hierarchy"},
		{mnt, "is a cgroup2 root"},
		{mnt + "/", "is a cgroup2 root"},
		{"edge", ""},
		{"edge/inner", ""},
		{mnt + "/edge", ""},
	} {
		c := DefaultConfig()
		c.Cgroup = tc.cgroup
		c.Service = []ServiceConfig{{VIP: "198.18.1.1", Port: 80, Backends: []string{"198.18.2.1:80"}}}
		_, err := c.Services()
		switch {
		case tc.want == "" && err != nil:
			assert.Fail(t, fmt.Sprintf("cgroup %q: Services() = %v, want accepted", tc.cgroup, err))
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			assert.Fail(t, fmt.Sprintf("cgroup %q: Services() = %v, want an error containing %q", tc.cgroup, err, tc.want))
		}
	}
}
