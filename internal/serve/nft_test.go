package serve

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestNftFromConfig renders the twin of a serve configuration file: its
// limits and lists must be in the ruleset, and nft must accept it.
func TestNftFromConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shield.toml")
	conf := `iface = "edge0"
table_size = 4096
[limits]
rate = 123
burst = 456
admission_rate = 789
admission_burst = 1011
protected = ["tcp/443", "udp/53", "icmp"]
key_prefix4 = 24
key_prefix6 = 48
[limits.unprotected]
rate = 5000
burst = 6000
admission_rate = 700
admission_burst = 800
[lists]
own_addresses_spoofed = false
allow = ["198.18.2.0/24"]
deny = ["198.18.3.0/24", "2001:db8:0:3::/64"]
`
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	var out bytes.Buffer
	require.NoError(t, Commands()["nft"].Run(context.Background(), &cli.Env{Stdout: &out, Stderr: os.Stderr}, []string{"-config", path}), "shield nft -config")
	rs := out.String()
	for _, want := range []string{
		`device "edge0"`,
		"size 4096",
		"ip saddr & 255.255.255.0 limit rate over 123/second burst 456 packets",
		"ip6 saddr & ffff:ffff:ffff:: limit rate over 123/second burst 456 packets",
		"limit rate over 5000/second burst 6000 packets",
		"limit admission_unprotected { rate over 700/second burst 800 packets }",
		"elements = { tcp . 443, udp . 53 }",
		"meta l4proto { icmp, ipv6-icmp } jump sources",
		"limit admission { rate over 789/second burst 1011 packets }",
		"elements = { 198.18.2.0/24 }",
		"elements = { 198.18.3.0/24 }",
		"elements = { 2001:db8:0:3::/64 }",
	} {
		assert.Contains(t, rs, want, "shield nft output lacks %q:\n%s", want, rs)
	}
	testutil.Root(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.SkipOrFail(t, "nft not installed (ci/deps.sh installs nftables)")
	}
	cmd := exec.Command("nft", "-c", "-f", "-")
	cmd.Stdin = strings.NewReader(rs)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "nft -c -f refuses the output: %s\n%s", b, rs)
}
