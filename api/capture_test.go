package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/shield/capture"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

const (
	capDenied  = "198.18.1.1" // on the deny list
	capFlood   = "198.18.2.2" // over its rate (burst 2, virtual clock stopped)
	capPassing = "198.18.3.3" // one frame a round: within its burst
)

// captureEnv is an env whose shield drops capDenied's frames as denied
// and capFlood's beyond a burst of 2 as over the limit.
func captureEnv(t *testing.T) *env {
	e := newEnv(t, api.Options{})
	require.NoError(t, e.sh.SetLimits(config.Limits{Rate: 1, Burst: 2, AdmissionRate: 1000, AdmissionBurst: 1000}))
	_, err := e.sh.Add(lists.DenyList, []netip.Prefix{netip.MustParsePrefix(capDenied + "/32")})
	require.NoError(t, err)
	return e
}

// sendRound runs frames from the three sources through the program (the
// simulator: BPF_PROG_TEST_RUN) and returns those it dropped. Source
// ports number the frames so that each is distinct.
func sendRound(t *testing.T, e *env, n int, port *uint16) (dropped, passed [][]byte) {
	t.Helper()
	for i := 0; i < n; i++ {
		for _, src := range []string{capDenied, capFlood, capPassing} {
			if src == capPassing && i > 0 {
				continue
			}
			*port++
			f := sim.From(src, sim.UDP)
			f.SrcPort = *port
			b := f.Bytes()
			act, err := sim.Run(e.sh.Program(), b)
			require.NoError(t, err)
			if act == sim.Drop {
				dropped = append(dropped, b)
			} else {
				passed = append(passed, b)
			}
		}
	}
	return dropped, passed
}

// startCapture sends GET /v1/capture and waits until sampling is on.
func startCapture(t *testing.T, ctx context.Context, e *env, query string) <-chan *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/capture?"+query, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	ch := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			close(ch)
			return
		}
		ch <- resp
	}()
	require.Eventually(t, func() bool {
		v, err := e.sh.CaptureSample()
		return err == nil && v != 0
	}, 5*time.Second, 5*time.Millisecond, "capture never switched on")
	return ch
}

func readPcap(t *testing.T, body []byte) (*pcapgo.Reader, [][]byte, []int) {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(body))
	require.NoError(t, err)
	var data [][]byte
	var orig []int
	for {
		b, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data = append(data, b)
		orig = append(orig, ci.Length)
	}
	return r, data, orig
}

func TestCaptureDropped(t *testing.T) {
	e := captureEnv(t)
	var port uint16

	// Frames are sensitive: no token, no capture.
	code, _ := e.do(t, "GET", "/v1/capture?seconds=1", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
	v, err := e.sh.CaptureSample()
	require.NoError(t, err)
	require.Zero(t, v)

	// Bounded by time: every dropped frame, no passed one, then off.
	start := time.Now()
	ch := startCapture(t, context.Background(), e, "count=1000&seconds=2")
	code, body := e.do(t, "GET", "/v1/capture?seconds=1", "Bearer "+testToken, "")
	require.Equal(t, http.StatusConflict, code, "a second capture at once: %s", body)
	dropped, passed := sendRound(t, e, 4, &port)
	resp := <-ch
	require.NotNil(t, resp)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(got))
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 2*time.Second)
	require.Less(t, took, 10*time.Second)
	v, err = e.sh.CaptureSample()
	require.NoError(t, err)
	require.Zero(t, v, "capture left on after the request")

	require.NotEmpty(t, passed)
	require.Len(t, dropped, 4+2) // 4 denied, 2 beyond the flood's burst
	r, frames, orig := readPcap(t, got)
	require.Equal(t, layers.LinkTypeEthernet, r.LinkType())
	require.EqualValues(t, capture.Snap, r.Snaplen())
	require.ElementsMatch(t, dropped, frames)
	for i, f := range frames {
		require.Equal(t, len(f), orig[i])
	}

	// tcpdump reads it and names the dropped sources, not the passed one.
	path := filepath.Join(t.TempDir(), "drops.pcap")
	require.NoError(t, os.WriteFile(path, got, 0o600))
	out, err := exec.Command("tcpdump", "-nn", "-r", path).CombinedOutput()
	require.NoError(t, err, string(out))
	lines := strings.Count(strings.TrimSpace(string(out)), "\n") // "reading from file" line first
	assert.Equal(t, len(dropped), lines, string(out))
	assert.Equal(t, 4, strings.Count(string(out), capDenied+"."), string(out))
	assert.Equal(t, 2, strings.Count(string(out), capFlood+"."), string(out))
	assert.NotContains(t, string(out), capPassing, string(out))

	// Bounded by count: 3 of the drops, well before the time bound.
	start = time.Now()
	ch = startCapture(t, context.Background(), e, "count=3&seconds=20")
	dropped, _ = sendRound(t, e, 4, &port)
	require.Greater(t, len(dropped), 3)
	resp = <-ch
	require.NotNil(t, resp)
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	_, frames, _ = readPcap(t, got)
	require.Len(t, frames, 3)
	for _, f := range frames {
		require.Contains(t, dropped, f)
	}
	v, err = e.sh.CaptureSample()
	require.NoError(t, err)
	require.Zero(t, v)
}

// TestCaptureReasons checks the metadata the program sends with a frame.
func TestCaptureReasons(t *testing.T) {
	e := captureEnv(t)
	var port uint16
	c, err := e.sh.StartCapture(1)
	require.NoError(t, err)
	_, err = e.sh.StartCapture(1)
	require.ErrorIs(t, err, capture.ErrBusy)
	dropped, _ := sendRound(t, e, 3, &port)
	reasons := map[string]int{}
	for range dropped {
		f, ok, err := c.Next(time.Now().Add(5 * time.Second))
		require.NoError(t, err)
		require.True(t, ok)
		src := netip.AddrFrom4([4]byte(f.Data[26:30])).String()
		require.Equal(t, len(f.Data), f.Len)
		require.Equal(t, counter.ProtoUDP, f.Proto)
		reasons[fmt.Sprintf("%s %s", src, f.Reason)]++
	}
	require.Equal(t, map[string]int{capDenied + " deny": 3, capFlood + " limit": 1}, reasons)
	require.NoError(t, c.Stop())
	v, err := e.sh.CaptureSample()
	require.NoError(t, err)
	require.Zero(t, v)
}

// TestCaptureOffWhenClientLeaves: a client gone mid-capture switches it
// off long before its time bound.
func TestCaptureOffWhenClientLeaves(t *testing.T) {
	e := captureEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := startCapture(t, ctx, e, "seconds=30")
	cancel()
	if resp := <-ch; resp != nil {
		resp.Body.Close()
	}
	require.Eventually(t, func() bool {
		v, err := e.sh.CaptureSample()
		return err == nil && v == 0
	}, 5*time.Second, 10*time.Millisecond, "capture left on after the client left")
	// And the next capture may start.
	c, err := e.sh.StartCapture(1)
	require.NoError(t, err)
	require.NoError(t, c.Stop())
}
