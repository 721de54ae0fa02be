package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// TestCaptureCommand: `shield capture -w FILE -count 2` writes the first
// two dropped frames as a pcap tcpdump reads; without a token it fails.
func TestCaptureCommand(t *testing.T) {
	testutil.Root(t)
	for _, k := range []string{EnvAPI, EnvToken, EnvTokenFile} {
		t.Setenv(k, "")
	}
	sh, err := shield.Load(shield.Options{TableSize: 4096, Clock: config.ClockVirtual})
	require.NoError(t, err)
	defer sh.Close()
	_, err = sh.Add(lists.DenyList, []netip.Prefix{netip.MustParsePrefix("198.18.0.9/32")})
	require.NoError(t, err)
	srv := httptest.NewServer(api.NewServer(sh, api.Options{Token: testToken, NoProcessMetrics: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer srv.Close()
	serveAdmin(t, srv.Config.Handler)
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte(testToken+"\n"), 0o600))
	file := filepath.Join(dir, "drops.pcap")

	err = Commands()["capture"].Run(context.Background(), testEnv(os.Stdout), []string{"-api", srv.URL, "-w", file, "-seconds", "1"})
	require.ErrorContains(t, err, "operator token")

	var errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Commands()["capture"].Run(context.Background(), &Env{Stdout: os.Stdout, Stderr: &errOut},
			[]string{"-api", srv.URL, "-token-file", tok, "-w", file, "-count", "2", "-seconds", "20"})
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
