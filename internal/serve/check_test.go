package serve

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

const testToken = "lifecycle-test-token-0123456789"

// testEnv prints to the test binary's stdout and stderr, as shield does.
func testEnv() *cli.Env {
	return &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, LogFormat: "text"}
}

// Tests named after issue 23's findings 5 and 6 that need no running
// service (cmd/shield's issue23_test.go has the rest).

// TestCheckRefusesWhatServeRefuses: `serve -check` said "configuration
// OK" for rate 1e6/s with burst 1000 on the jiffies clock, which serve
// then refused (a tick refills at most the burst: the rate would be
// capped at burst x HZ). -check now makes serve's own check.
func TestCheckRefusesWhatServeRefuses(t *testing.T) {
	testutil.Root(t) // the tick is measured through BPF_PROG_TEST_RUN
	conf := filepath.Join(t.TempDir(), "shield.toml")
	require.NoError(t, os.WriteFile(conf, []byte("iface = \"eth0\"\nclock = \"jiffies\"\n[limits]\nrate = 1000000\nburst = 1000\n"), 0o600))
	err := Commands()["serve"].Run(context.Background(), testEnv(), []string{"-check", "-config", conf})
	require.Error(t, err, "serve -check accepted rate 1e6/s burst 1000 on jiffies")
	assert.Contains(t, err.Error(), "ceil(rate / HZ)")
}

// TestServeRefusesTokenFileOfAnotherUser: a token file of mode 0600 owned
// by another user was accepted: that user chose the token the service
// takes for the operator's.
func TestServeRefusesTokenFileOfAnotherUser(t *testing.T) {
	testutil.Root(t) // chown
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(testToken+"\n"), 0o600))
	require.NoError(t, os.Chown(tok, testutil.Nobody, testutil.Nobody))
	conf := filepath.Join(dir, "shield.toml")
	require.NoError(t, os.WriteFile(conf, []byte("iface = \"eth0\"\n[api]\ntoken_file = \""+tok+"\"\n"), 0o600))
	err := Commands()["serve"].Run(context.Background(), testEnv(), []string{"-check", "-config", conf})
	require.Error(t, err, "serve -check accepted a token file owned by nobody")
	assert.Contains(t, err.Error(), "belongs to uid 65534")
	// The CLI reads a token file of its own user as before.
	require.NoError(t, os.Chown(tok, os.Geteuid(), os.Getegid()))
	require.NoError(t, Commands()["serve"].Run(context.Background(), testEnv(), []string{"-check", "-config", conf}))
}
