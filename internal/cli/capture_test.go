package cli

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// TestCaptureCommand: `shield capture -w FILE -count 2` writes the first
// two dropped frames as a pcap tcpdump reads; without a token it fails.
func TestCaptureCommand(t *testing.T) {
	sh, url, tok := testService(t, nil)
	_, err := sh.Add(lists.DenyList, []netip.Prefix{netip.MustParsePrefix("198.18.0.9/32")})
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "drops.pcap")

	err = Commands()["capture"].Run(context.Background(), testEnv(os.Stdout), []string{"-api", url, "-w", file, "-seconds", "1"})
	require.ErrorContains(t, err, "operator token")

	var errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Commands()["capture"].Run(context.Background(), &Env{Stdout: os.Stdout, Stderr: &errOut},
			[]string{"-api", url, "-token-file", tok, "-w", file, "-count", "2", "-seconds", "20"})
	}()
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			require.NoError(t, err, "capture ended before any drop")
		default:
		}
		v, err := sh.CaptureSample()
		return err == nil && v == 1
	}, 5*time.Second, 5*time.Millisecond)
	for _, src := range []string{"198.18.0.8", "198.18.0.9", "198.18.0.9", "198.18.0.9"} {
		act, err := sim.Run(sh.Program(), sim.From(src, sim.UDP).Bytes())
		require.NoError(t, err)
		require.Equal(t, src == "198.18.0.9", act == sim.Drop, src)
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		require.Fail(t, "capture did not stop at its count")
	}
	require.Contains(t, errOut.String(), "2 dropped frames written to "+file)
	out, err := exec.Command("tcpdump", "-nn", "-r", file).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, 2, strings.Count(string(out), "198.18.0.9."), string(out))
	require.NotContains(t, string(out), "198.18.0.8", string(out))
}
