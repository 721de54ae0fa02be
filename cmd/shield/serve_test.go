package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/serve"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/pin"
	"github.com/xdpshield/xdpshield/shield/source"
)

// envAsMain makes the test binary run main() instead of the tests: the
// service under test is this very binary, started as `shield serve` in the
// edge namespace.
const envAsMain = "SHIELD_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envAsMain) == "1" {
		main()
		os.Exit(0)
	}
	if d := os.Getenv(envMkdir); d != "" {
		if err := os.Mkdir(d, 0o755); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if addr := os.Getenv(envSquat); addr != "" {
		squat(addr)
		os.Exit(0)
	}
	// Every service and CLI of the tests puts and finds its admin socket
	// here, not in /run/xdpshield.
	dir, err := os.MkdirTemp("", "shield-admin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "no admin directory of the tests' own, services use the default:", err)
		os.Exit(m.Run())
	}
	os.Setenv(cli.EnvAdminDir, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testToken = "lifecycle-test-token-0123456789"

// lab is an edge namespace (the shield on va, 198.18.0.1) and a storm
// namespace (vb, 198.18.0.2 and .3) joined by a veth pair, plus a private
// pin root on bpffs.
type lab struct {
	edge, storm *topo.NS
	pinRoot     string
	tokenFile   string
	client      *client.Client
}

func newLab(t *testing.T, role string) *lab {
	t.Helper()
	testutil.Root(t)
	_, err := exec.LookPath("nsenter")
	require.NoError(t, err, "nsenter (util-linux) is needed to start the service in a namespace")
	l := &lab{}
	l.edge, err = topo.New(role + "-edge")
	require.NoError(t, err)
	t.Cleanup(func() { l.edge.Close() })
	l.storm, err = topo.New(role + "-storm")
	require.NoError(t, err)
	t.Cleanup(func() { l.storm.Close() })
	require.NoError(t, topo.Veth(l.edge, "va", l.storm, "vb"))
	for _, a := range []struct {
		ns   *topo.NS
		dev  string
		cidr string
	}{{l.edge, "va", "198.18.0.1/24"}, {l.storm, "vb", "198.18.0.2/24"}, {l.storm, "vb", "198.18.0.3/24"}} {
		require.NoError(t, a.ns.AddAddr(a.dev, a.cidr))
	}
	l.pinRoot = filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-%s-%d", role, os.Getpid()))
	require.NoError(t, pinfs.EnsureBPFFS(l.pinRoot))
	t.Cleanup(func() {
		// Pins left by a failed test: detach first so no link stays.
		l.edge.Do(func() error { return pin.Detach(l.pinRoot, "va", serve.LBPins...) })
		os.RemoveAll(l.pinRoot)
	})
	l.tokenFile = filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(l.tokenFile, []byte(testToken+"\n"), 0o600))
	l.client = clientIn(t, l.edge)
	return l
}

// clientIn is an API client for the service on ns's loopback.
func clientIn(t *testing.T, ns *topo.NS) *client.Client {
	// The API listens on the edge namespace's loopback: dial from there.
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &client.Client{Base: "http://" + api.DefaultListen, Token: testToken, Operator: "lifecycle-test",
		HTTP: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// pinDir is where serve, run in the edge namespace, pins va.
func (l *lab) pinDir(t *testing.T) string {
	t.Helper()
	var dir string
	require.NoError(t, l.edge.Do(func() error {
		var err error
		dir, err = pin.PinDir(l.pinRoot, "va")
		return err
	}))
	return dir
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shieldCmd runs this test binary as `shield ARGS...` in the edge namespace
// (network namespace only: pins live on the root mount namespace's bpffs).
func (l *lab) shieldCmd(args ...string) (*exec.Cmd, *syncBuffer) {
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + l.edge.Name, os.Args[0]}, args...)...)
	cmd.Env = append(os.Environ(), envAsMain+"=1")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}

type service struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

// serve starts the service and waits until its API answers.
func (l *lab) serve(t *testing.T, extra ...string) *service {
	t.Helper()
	args := append([]string{"serve", "-iface", "va", "-pin-root", l.pinRoot, "-token-file", l.tokenFile}, extra...)
	cmd, out := l.shieldCmd(args...)
	require.NoError(t, cmd.Start(), "start serve")
	s := &service{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := l.client.Limits(ctx)
		cancel()
		if err == nil {
			return s
		}
		select {
		case err := <-s.done:
			s.done <- err
			require.Fail(t, fmt.Sprintf("serve exited (%v) before answering:\n%s", err, out))
		default:
		}
		require.False(t, time.Now().After(deadline), "serve did not answer within 30 s: %v\n%s", err, out)
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *service) stop(t *testing.T) {
	t.Helper()
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		assert.NoError(t, err, "serve exited with %v:\n%s", err, s.out)
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		assert.Fail(t, "serve did not stop within 30 s:\n"+s.out.String())
	}
}

// udpFlow sends datagrams from src (in the storm namespace) to the edge's
// 198.18.0.1:9999, where a socket counts what arrives.
type udpFlow struct {
	sent atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
}

func (l *lab) receiver(t *testing.T, port int) (*net.UDPConn, *atomic.Int64) {
	t.Helper()
	var rc *net.UDPConn
	require.NoError(t, l.edge.Do(func() error {
		var err error
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1), Port: port})
		return err
	}))
	t.Cleanup(func() { rc.Close() })
	var n atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := rc.Read(buf); err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			n.Add(1)
		}
	}()
	return rc, &n
}

func (l *lab) sender(t *testing.T, src string, port int, every time.Duration, count int) *udpFlow {
	t.Helper()
	var c *net.UDPConn
	require.NoError(t, l.storm.Do(func() error {
		var err error
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1), Port: port})
		return err
	}))
	f := &udpFlow{stop: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer c.Close()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; count == 0 || i < count; i++ {
			if _, err := c.Write([]byte("xdpshield lifecycle test")); err == nil {
				f.sent.Add(1)
			}
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(f.halt)
	return f
}

func (f *udpFlow) halt() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.wg.Wait()
}

func denyDrops(t *testing.T, l *lab) uint64 {
	t.Helper()
	c, err := l.client.Counters(context.Background())
	require.NoError(t, err, "Counters")
	for _, p := range c.Packets {
		if p.Verdict == "drop" && p.Reason == "deny" && p.Proto == "udp" {
			return p.Packets
		}
	}
	require.Fail(t, "no drop/deny/udp counter")
	return 0
}

func linkInfo(t *testing.T, l *lab) *link.Info {
	t.Helper()
	lk, err := link.LoadPinnedLink(filepath.Join(l.pinDir(t), "link"), nil)
	require.NoError(t, err, "load pinned link")
	defer lk.Close()
	info, err := lk.Info()
	require.NoError(t, err, "link info")
	return info
}

// xdpAttached reports whether the edge's va has an XDP program, and how.
func xdpAttached(t *testing.T, l *lab) (bool, uint32) { return xdpAttachedOn(t, l, "va") }

func xdpAttachedOn(t *testing.T, l *lab, iface string) (bool, uint32) {
	t.Helper()
	var x *netlink.LinkXdp
	require.NoError(t, l.edge.Do(func() error {
		lk, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		x = lk.Attrs().Xdp
		return nil
	}))
	if x == nil {
		return false, 0
	}
	return x.Attached, x.AttachMode
}

// TestServeLifecycle: attach, refuse a second instance, restart with
// traffic flowing from a deny-listed source (nothing may reach the stack),
// adopt (limits, lists, counters and sources intact), replace the program
// through the link, detach; then the mode is kept across restarts.
func TestServeLifecycle(t *testing.T) {
	l := newLab(t, "life")
	ctx := context.Background()
	_, received := l.receiver(t, 9999)

	s1 := l.serve(t)
	require.Contains(t, s1.out.String(), "msg=attached", "first serve did not log a fresh attach:\n%s", s1.out)

	// Safe default: the machine's own addresses are marked own (a frame
	// from the wire claiming one is spoofed), not allow-listed.
	al, err := l.client.List(ctx, lists.AllowList)
	if assert.NoError(t, err, "allow list") {
		assert.Empty(t, al.Prefixes, "allow list = %v; want it empty", al.Prefixes)
	}
	for _, want := range []string{"msg=\"own addresses: frames from the wire claiming them are dropped as spoofed\"", "198.18.0.1"} {
		assert.Contains(t, s1.out.String(), want, "serve did not log the edge's own addresses as spoofed sources")
	}

	// The path works: an unlisted source gets through.
	legit := l.sender(t, "198.18.0.3", 9999, time.Millisecond, 5)
	legit.wg.Wait()
	waitFor(t, "5 packets from 198.18.0.3", func() bool { return received.Load() >= 5 })

	limits := config.Limits{Rate: 123, Burst: 456, AdmissionRate: 789, AdmissionBurst: 1011}
	_, err = l.client.SetLimits(ctx, limits)
	require.NoError(t, err, "SetLimits")
	_, err = l.client.Add(ctx, lists.DenyList, []string{"198.18.0.2/32", "2001:db8:bad::/48"})
	require.NoError(t, err, "deny add")
	before := received.Load()

	// Deny-listed traffic flows for the rest of the test.
	flood := l.sender(t, "198.18.0.2", 9999, 200*time.Microsecond, 0)
	waitFor(t, "deny drops", func() bool { return denyDrops(t, l) > 100 })

	// A second instance is refused while the first runs.
	cmd, out := l.shieldCmd("serve", "-iface", "va", "-pin-root", l.pinRoot, "-token-file", l.tokenFile, "-listen", "127.0.0.1:9471")
	require.Error(t, cmd.Run(), "second serve: want a refusal naming the lock:\n%s", out)
	require.Contains(t, out.String(), "already running on va", "second serve: want a refusal naming the lock")

	info1 := linkInfo(t, l)
	drops1 := denyDrops(t, l)
	sent1 := flood.sent.Load()
	s1.stop(t)
	ok, _ := xdpAttached(t, l)
	require.True(t, ok, "no XDP program on va after the service stopped")
	time.Sleep(300 * time.Millisecond) // traffic keeps hitting the pinned program

	s2 := l.serve(t)
	assert.Contains(t, s2.out.String(), "adopted pinned shield", "second serve did not adopt:\n%s", s2.out)
	info2 := linkInfo(t, l)
	assert.Equal(t, info1.ID, info2.ID, "link id = %d after restart, want the pinned %d", info2.ID, info1.ID)
	assert.NotEqual(t, info1.Program, info2.Program, "program id = %d after restart, want a new program replacing %d", info2.Program, info1.Program)
	assert.Contains(t, s2.out.String(), fmt.Sprintf("old_program_id=%d", info1.Program), "restart log does not name the replaced program %d:\n%s", info1.Program, s2.out)

	in, err := l.client.Info(ctx)
	if assert.NoError(t, err, "Info after restart") {
		const msg = "Info after restart = %+v; want adopted, va, native, link %d, program %d"
		assert.True(t, in.Adopted, msg, in, info2.ID, info2.Program)
		assert.Equal(t, "va", in.Iface, msg, in, info2.ID, info2.Program)
		assert.Equal(t, uint32(info2.ID), in.LinkID, msg, in, info2.ID, info2.Program)
		assert.Equal(t, uint32(info2.Program), in.ProgramID, msg, in, info2.ID, info2.Program)
		assert.Equal(t, "native", in.Mode, msg, in, info2.ID, info2.Program)
	}

	// State survived.
	got, err := l.client.Limits(ctx)
	if assert.NoError(t, err, "Limits after restart") {
		assert.True(t, got.Equal(limits), "Limits after restart = %+v; want %+v", got, limits)
	}
	dl, err := l.client.List(ctx, lists.DenyList)
	if assert.NoError(t, err, "deny list after restart") {
		assert.Equal(t, "198.18.0.2/32 2001:db8:bad::/48", strings.Join(dl.Prefixes, " "), "deny list after restart")
	}
	top, err := l.client.Top(ctx, 10, source.ByPassed)
	require.NoError(t, err, "Top")
	found := false
	for _, s := range top.Sources {
		if s.Addr == netip.MustParseAddr("198.18.0.3") && s.Passed >= 5 {
			found = true
		}
	}
	assert.True(t, found, "tracked source 198.18.0.3 lost across restart: %+v", top.Sources)

	time.Sleep(300 * time.Millisecond)
	flood.halt()
	time.Sleep(100 * time.Millisecond)
	drops2 := denyDrops(t, l)
	sent := flood.sent.Load()
	assert.True(t, drops2 >= drops1, "deny counter went back from %d to %d: counters not adopted", drops1, drops2)
	// Every datagram sent during the restart was counted as dropped.
	during, dropped := sent-sent1, drops2-drops1
	assert.GreaterOrEqual(t, dropped, uint64(during)*9/10, "during the restart %d datagrams were sent, only %d counted as deny drops", during, dropped)
	reached := received.Load()
	require.Equal(t, before, reached, "%d datagrams from the deny-listed source reached the stack (sent %d)", reached-before, sent)
	t.Logf("restart: %d datagrams sent by the denied source, %d counted as deny drops, 0 received", sent, drops2)

	// Detach refuses while the service runs, then removes everything.
	cmd, out = l.shieldCmd("detach", "-iface", "va", "-pin-root", l.pinRoot)
	assert.Error(t, cmd.Run(), "detach while serving succeeded:\n%s", out)
	assert.Contains(t, out.String(), "stop it first", "detach while serving said")
	s2.stop(t)
	cmd, out = l.shieldCmd("detach", "-iface", "va", "-pin-root", l.pinRoot)
	require.NoError(t, cmd.Run(), "detach failed:\n%s", out)
	ok, _ = xdpAttached(t, l)
	assert.False(t, ok, "XDP program still attached after detach")
	_, err = os.Stat(l.pinDir(t))
	assert.ErrorIs(t, err, os.ErrNotExist, "pin directory still there after detach")
	// Without the shield the same source gets through: the sender was live.
	after := l.sender(t, "198.18.0.2", 9999, time.Millisecond, 5)
	after.wg.Wait()
	waitFor(t, "traffic after detach", func() bool { return received.Load() >= before+5 })

	// Mode: generic as asked, kept across a restart, a different one refused.
	s3 := l.serve(t, "-mode", "generic")
	_, mode := xdpAttached(t, l)
	assert.EqualValues(t, 2, mode, "attach mode = %d, want generic (2)", mode) // XDP_ATTACHED_SKB
	s3.stop(t)
	cmd, out = l.shieldCmd("serve", "-iface", "va", "-pin-root", l.pinRoot, "-token-file", l.tokenFile, "-mode", "native")
	assert.Error(t, cmd.Run(), "serve -mode native over a generic link:\n%s", out)
	assert.Contains(t, out.String(), "attached in generic mode, native was asked", "serve -mode native over a generic link")
	ok, mode = xdpAttached(t, l)
	assert.True(t, ok, "after the refused restart: attached %v mode %d, want the generic program kept", ok, mode)
	assert.EqualValues(t, 2, mode, "after the refused restart: attached %v mode %d, want the generic program kept", ok, mode)
	cmd, out = l.shieldCmd("detach", "-iface", "va", "-pin-root", l.pinRoot)
	require.NoError(t, cmd.Run(), "detach failed:\n%s", out)
}

// waitLog waits until the service has written want: the API can answer
// before the pipe has carried an earlier log line into out.
func (s *service) waitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.out.String(), want) {
		require.False(t, time.Now().After(deadline), "serve did not log %q:\n%s", want, s.out)
		time.Sleep(20 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(20 * time.Millisecond)
	}
}
