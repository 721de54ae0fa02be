package policy

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSectionEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		sec  Section
		want bool
	}{
		{"empty", Section{}, false},
		{"listen only", Section{Listen: "198.18.0.1:80"}, true},
		{"fast_path only", Section{FastPath: "off"}, true},
		{"a rule only", Section{Config: Config{RBAC: []Rule{{Action: "deny"}}}}, true},
		{"set_header value only", Section{Config: Config{SetHeader: Header{Value: "x"}}}, true},
	} {
		got := tc.sec.Enabled()
		assert.EqualValues(t, tc.want, got, "%s: Enabled() = %v, want %v", tc.name, got, tc.want)
		// A section saying something is validated: none of these is whole.
		err := tc.sec.Validate()
		assert.EqualValues(t, tc.want, (err != nil), "%s: Validate() = %v, want an error %v", tc.name, err, tc.want)
	}
}

// TestLoops: a backend that is the proxy's own listening socket is refused,
// by address and port, through an unspecified listen address of its
// family (0.0.0.0 takes IPv4 alone, :: both), and through the
// namespace's own addresses; another port, another address of a specific
// listen, or the other family of 0.0.0.0 is no loop.
func TestLoops(t *testing.T) {
	local := []netip.Addr{netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("fe80::7")}
	for _, tc := range []struct {
		listen, backend string
		loop            bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"127.0.0.1:8080", "127.0.0.1:8081", false},
		{"127.0.0.1:8080", "127.0.0.2:8080", false},
		{"198.18.0.7:8080", "198.18.0.7:8080", true},
		{"0.0.0.0:8080", "127.0.0.2:8080", true},
		{"0.0.0.0:8080", "0.0.0.0:8080", true},
		{"0.0.0.0:8080", "198.18.0.7:8080", true},
		{"0.0.0.0:8080", "198.18.0.8:8080", false},
		// Go's net.Listen("tcp", "0.0.0.0:p") listens on [::]:p, both
		// families (TestServerRefusesLoop sees it).
		{"0.0.0.0:8080", "[::1]:8080", true},
		{"0.0.0.0:8080", "[2001:db8::7]:8080", true},
		{"0.0.0.0:8080", "[2001:db8::8]:8080", false},
		{"[::ffff:198.18.0.7]:8080", "198.18.0.7:8080", true},
		{"[::ffff:198.18.0.7]:8080", "[::1]:8080", false},
		{"[::]:8080", "[::1]:8080", true},
		{"[::]:8080", "127.0.0.1:8080", true},
		{"[::]:8080", "[2001:db8::7]:8080", true},
		{"[::]:8080", "[::ffff:198.18.0.7]:8080", true},
		{"[::]:8080", "[2001:db8::8]:8080", false},
		// A link-local backend names its interface; the namespace's
		// addresses do not.
		{"[::]:8080", "[fe80::7%eth0]:8080", true},
		{"[::]:8080", "[fe80::8%eth0]:8080", false},
		{"[::]:8080", "[::1]:8081", false},
	} {
		c := Config{Routes: []Route{
			{Name: "a", PathPrefix: "/a", Backends: []string{"198.18.1.1:80"}},
			{Name: "b", PathPrefix: "/b", Backends: []string{"198.18.1.2:80", tc.backend}},
		}}
		err := Loops(netip.MustParseAddrPort(tc.listen), c, local)
		if assert.Equal(t, tc.loop, err != nil, "Loops(listen %s, backend %s) = %v, want a loop %v", tc.listen, tc.backend, err, tc.loop) && tc.loop {
			assert.ErrorContains(t, err, "l7.route[1].backends[1]", "Loops(listen %s, backend %s) = %v, want it to name l7.route[1].backends[1]", tc.listen, tc.backend, err)
		}
	}
}
