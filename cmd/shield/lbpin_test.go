package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/cgroup2"
	"github.com/xdpshield/xdpshield/lb/lbpin"
)

// envLBClient makes the test binary a TCP client (see init): "NETNS
// ADDR:PORT" connects from that namespace, asks, and prints the answer and
// getpeername(2); then, for every line read on stdin, asks again and prints
// both again (getpeername asked of the kernel anew, not cached). With no
// stdin it asks once.
const envLBClient = "SHIELD_TEST_LB_CLIENT"

func init() {
	arg := os.Getenv(envLBClient)
	if arg == "" {
		return
	}
	if err := lbHold(arg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func lbHold(arg string) error {
	name, dst, _ := strings.Cut(arg, " ")
	c, err := testutil.DialFromNetns(name, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	in := bufio.NewReader(os.Stdin)
	for {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "?\n")
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		var sa unix.Sockaddr
		var serr error
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return err
		}
		rc.Control(func(fd uintptr) { sa, serr = unix.Getpeername(int(fd)) })
		if serr != nil {
			return serr
		}
		peer := "?"
		if s4, ok := sa.(*unix.SockaddrInet4); ok {
			peer = fmt.Sprintf("%s:%d", net.IP(s4.Addr[:]), s4.Port)
		}
		fmt.Printf("%s %s\n", strings.TrimSpace(line), peer)
		if _, err := in.ReadString('\n'); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// lbResponders runs TCP responders in the storm namespace that answer each
// line with their local address.
func lbResponders(t *testing.T, l *lab, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		var ln net.Listener
		require.NoError(t, l.storm.Do(func() error {
			var err error
			ln, err = net.Listen("tcp", a)
			return err
		}))
		testutil.AnswerLines(t, ln, func(c net.Conn) string { return c.LocalAddr().String() })
	}
}

// TestServeLBPinned: the balancer's links and maps are pinned, so while
// serve is down (kill -9, SIGTERM) a process in the cgroup still reaches a
// backend through the VIP and sees the VIP as its peer; a restart adopts
// them (a socket connected before still sees the VIP) and applies the
// configuration whole (a backend removed from it while serve was down is
// gone); a configuration with no service removes them; `shield detach
// -lb-only` removes only the balancer's pins, and `shield detach` removes
// them with the shield's.
func TestServeLBPinned(t *testing.T) {
	l := newLab(t, "lbpin")
	// A decoy holds the VIP: an untranslated connect lands there and
	// answers "198.18.0.100:80".
	require.NoError(t, l.storm.AddAddr("vb", "198.18.0.100/24"))
	const vip, decoy = "198.18.0.100:80", "198.18.0.100:80"
	lbResponders(t, l, "198.18.0.2:8080", "198.18.0.3:8080", decoy)

	mnt := t.TempDir()
	require.NoError(t, cgroup2.Mount(mnt))
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	cg := filepath.Join(mnt, fmt.Sprintf("xdps-lbpin-%d", os.Getpid()))
	t.Cleanup(func() { os.Remove(cg) })
	conf := filepath.Join(t.TempDir(), "shield.toml")
	writeConf := func(backends string) {
		t.Helper()
		require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`[lb]
cgroup = %q
[[lb.service]]
vip = "198.18.0.100"
port = 80
backends = [%s]
`, cg, backends)), 0o600))
	}
	writeConf(`"198.18.0.2:8080", "198.18.0.3:8080"`)

	// inCgroup runs this test binary with env in the cgroup.
	inCgroup := func(env string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env+"="+l.edge.Name+" "+vip)
		d, err := os.Open(cg)
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
		return cmd
	}
	// client connects once: what answered, and the peer it saw.
	client := func(when string) (string, string) {
		t.Helper()
		cmd := inCgroup(envLBClient)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		require.NoError(t, cmd.Run(), "client %s: %s", when, &errb)
		f := strings.Fields(out.String())
		require.Len(t, f, 2, "client %s printed %q", when, out.String())
		return f[0], f[1]
	}
	lbDir := filepath.Join(l.pinDir(t), lbpin.Subdir)

	s1 := l.serve(t, "-config", conf)
	s1.waitLog(t, `msg="lb attached"`)
	_, err := os.Stat(lbDir)
	assert.NoError(t, err, "serve pinned no balancer in %s", lbDir)

	// A socket connected before everything that follows, held open.
	hold := inCgroup(envLBClient)
	holdIn, err := hold.StdinPipe()
	require.NoError(t, err)
	holdOut, err := hold.StdoutPipe()
	require.NoError(t, err)
	var holdErr bytes.Buffer
	hold.Stderr = &holdErr
	require.NoError(t, hold.Start())
	t.Cleanup(func() { holdIn.Close(); hold.Wait() })
	holdLines := bufio.NewReader(holdOut)
	holdAsk := func(when string) (string, string) {
		t.Helper()
		if when != "" {
			fmt.Fprintln(holdIn)
		}
		line, err := holdLines.ReadString('\n')
		f := strings.Fields(line)
		require.NoError(t, err, "held socket %s: %q: %s", when, line, &holdErr)
		require.Len(t, f, 2, "held socket %s: %q: %s", when, line, &holdErr)
		return f[0], f[1]
	}
	heldBE, peer := holdAsk("")
	require.NotEqual(t, decoy, heldBE, "held socket reached %s with peer %s, want a backend and the VIP", heldBE, peer)
	require.Equal(t, vip, peer, "held socket reached %s with peer %s, want a backend and the VIP", heldBE, peer)

	// kill -9: nothing closes anything.
	require.NoError(t, s1.cmd.Process.Kill())
	<-s1.done
	for i := range 5 {
		be, peer := client("after kill -9")
		const msg = "connect %d with serve killed reached %s with peer %s; want a backend and the VIP (the decoy is the untranslated VIP)"
		if !assert.NotEqual(t, decoy, be, msg, i, be, peer) || !assert.Equal(t, vip, peer, msg, i, be, peer) {
			break
		}
	}

	// The backend the held socket did not reach leaves the configuration
	// while serve is down. (A socket on a removed backend is destroyed
	// where the kernel has bpf_sock_destroy, 6.5+: lb's
	// TestRemovedSockets proves that; here the held socket must outlive
	// the restart, so it is the backend that stays.)
	kept, removed := "198.18.0.3:8080", "198.18.0.2:8080"
	if heldBE == removed {
		kept, removed = removed, kept
	}
	writeConf(strconv.Quote(kept))
	s2 := l.serve(t, "-config", conf)
	s2.waitLog(t, `msg="lb attached"`)
	assert.Contains(t, s2.out.String(), "adopted=true", "the restarted serve did not adopt the pinned balancer:\n%s", s2.out)
	be, peer := holdAsk("after the restart")
	assert.Equal(t, heldBE, be, "socket connected before the restart: answered by %s with peer %s, want %s and the VIP", be, peer, heldBE)
	assert.Equal(t, vip, peer, "socket connected before the restart: answered by %s with peer %s, want %s and the VIP", be, peer, heldBE)
	for i := range 10 {
		be, peer := client("after the restart")
		require.Equal(t, kept, be, "connect %d after the restart reached %s with peer %s; want %s (%s was removed) and the VIP", i, be, peer, kept, removed)
		require.Equal(t, vip, peer, "connect %d after the restart reached %s with peer %s; want %s (%s was removed) and the VIP", i, be, peer, kept, removed)
	}

	// SIGTERM: a clean stop keeps the balancer too.
	s2.stop(t)
	be, peer = client("after SIGTERM")
	assert.Equal(t, kept, be, "connect with serve stopped reached %s with peer %s; want %s and the VIP", be, peer, kept)
	assert.Equal(t, vip, peer, "connect with serve stopped reached %s with peer %s; want %s and the VIP", be, peer, kept)

	// detach -lb-only: the balancer goes, the shield stays.
	cmd, out := l.shieldCmd("detach", "-iface", "va", "-pin-root", l.pinRoot, "-lb-only")
	require.NoError(t, cmd.Run(), "detach -lb-only: %s", out)
	_, err = os.Stat(lbDir)
	assert.ErrorIs(t, err, os.ErrNotExist, "%s after detach -lb-only: want it gone", lbDir)
	_, err = os.Stat(filepath.Join(filepath.Dir(lbDir), "link"))
	assert.NoError(t, err, "the shield's link after detach -lb-only: want it kept")
	be, _ = client("after detach -lb-only")
	assert.Equal(t, decoy, be, "connect after detach -lb-only reached %s, want the untranslated VIP (decoy)", be)

	// A fresh start pins again; detach removes everything.
	s3 := l.serve(t, "-config", conf)
	s3.waitLog(t, `msg="lb attached"`)
	assert.Contains(t, s3.out.String(), "adopted=false", "serve after detach -lb-only adopted something:\n%s", s3.out)
	s3.stop(t)
	be, peer = client("after a fresh start")
	assert.Equal(t, kept, be, "connect after a fresh start, serve stopped: %s with peer %s; want %s and the VIP", be, peer, kept)
	assert.Equal(t, vip, peer, "connect after a fresh start, serve stopped: %s with peer %s; want %s and the VIP", be, peer, kept)

	// A configuration with no service left: serve removes the pinned one.
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("[lb]\ncgroup = %q\n", cg)), 0o600))
	s4 := l.serve(t, "-config", conf)
	s4.waitLog(t, `msg="lb removed`)
	_, err = os.Stat(lbDir)
	assert.ErrorIs(t, err, os.ErrNotExist, "%s with no service configured: want it removed", lbDir)
	be, _ = client("with no service configured")
	assert.Equal(t, decoy, be, "connect with no service configured reached %s, want the untranslated VIP (decoy)", be)
	writeConf(strconv.Quote(kept))
	s4.stop(t)
	s5 := l.serve(t, "-config", conf)
	s5.waitLog(t, `msg="lb attached"`)
	s5.stop(t)
	cmd, out = l.shieldCmd("detach", "-iface", "va", "-pin-root", l.pinRoot)
	require.NoError(t, cmd.Run(), "detach: %s", out)
	_, err = os.Stat(filepath.Dir(lbDir))
	assert.ErrorIs(t, err, os.ErrNotExist, "pin directory after detach: want it gone with the balancer's pins")
	be, _ = client("after detach")
	assert.Equal(t, decoy, be, "connect after detach reached %s, want the untranslated VIP (decoy)", be)
}
