package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"xdpshield/internal/testutil"
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
[lists]
allow_own_addresses = false
allow = ["198.18.2.0/24"]
deny = ["198.18.3.0/24", "2001:db8:0:3::/64"]
`
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	stdout = &out
	defer func() { stdout = os.Stdout }()
	if err := commands["nft"].run(context.Background(), []string{"-config", path}); err != nil {
		t.Fatalf("shield nft -config: %v", err)
	}
	rs := out.String()
	for _, want := range []string{
		`device "edge0"`,
		"size 4096",
		"limit rate over 123/second burst 456 packets",
		"limit admission { rate over 789/second burst 1011 packets }",
		"elements = { 198.18.2.0/24 }",
		"elements = { 198.18.3.0/24 }",
		"elements = { 2001:db8:0:3::/64 }",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("shield nft output lacks %q:\n%s", want, rs)
		}
	}
	testutil.Root(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.SkipOrFail(t, "nft not installed (ci/deps.sh installs nftables)")
	}
	cmd := exec.Command("nft", "-c", "-f", "-")
	cmd.Stdin = strings.NewReader(rs)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -c -f refuses the output: %v: %s\n%s", err, b, rs)
	}
}
