package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/api/client"
	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// Tests named after the findings of issue 10 ("the service under attack and
// accident"), each run against the real `shield serve` process.

// TestServeInAnotherNamespaceDoesNotTakeOver (finding 1): two network
// namespaces, each with an interface va, one pin root. The service of the
// first stops (its program stays attached through the pinned link); a
// service in the second must attach its own program and leave the first
// namespace's link alone.
func TestServeInAnotherNamespaceDoesNotTakeOver(t *testing.T) {
	a := newLab(t, "nsa")
	b := newLab(t, "nsb")
	os.Remove(b.pinRoot) // b shares a's root
	b.pinRoot = a.pinRoot
	s1 := a.serve(t)
	s1.stop(t)
	okA, modeA := xdpAttached(t, a)
	require.True(t, okA, "after the first service stopped, va in %s has no XDP program", a.edge.Name)
	s2 := b.serve(t)
	ok, mode := xdpAttached(t, a)
	const takenOver = "after a service started in %s, va in %s has XDP attached %v (mode %d), want true (mode %d): taken over\n%s"
	assert.True(t, ok, takenOver, b.edge.Name, a.edge.Name, ok, mode, modeA, s2.out)
	assert.Equal(t, modeA, mode, takenOver, b.edge.Name, a.edge.Name, ok, mode, modeA, s2.out)
	ok, _ = xdpAttached(t, b)
	assert.True(t, ok, "va in %s has no XDP program though its service runs", b.edge.Name)
	for _, no := range []string{"adopted", "attaching afresh"} {
		assert.NotContains(t, s2.out.String(), no, "the second namespace's service adopted or unpinned the first's link")
	}
}

// TestDetachRefusesNonBPFFS (finding 2): `shield detach -pin-root DIR` on an
// ordinary directory must delete nothing.
func TestDetachRefusesNonBPFFS(t *testing.T) {
	testutil.Root(t) // detach takes the pin root's lock first, as root
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim", "a.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(victim), 0o700))
	require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o600))
	cmd, out := plainCmd("detach", "-iface", "victim", "-pin-root", dir)
	assert.Error(t, cmd.Run(), "shield detach -pin-root %s (not bpffs) exited 0, want an error:\n%s", dir, out)
	_, err := os.Stat(victim)
	assert.NoError(t, err, "detach on a non-bpffs directory removed %s:\n%s", victim, out)
	assert.Contains(t, out.String(), "not on a bpf filesystem", "detach output = %q, want it to say the directory is not on a bpf filesystem", out)
}

// TestFailedAttachLeavesNoOrphanPins (finding 7): a second service on the
// same interface under another pin root fails to attach (the first one's
// program is there); it must leave no pins behind.
func TestFailedAttachLeavesNoOrphanPins(t *testing.T) {
	l := newLab(t, "orphan")
	l.serve(t)
	other := l.pinRoot + "-other"
	require.NoError(t, pinfs.EnsureBPFFS(other))
	t.Cleanup(func() { os.RemoveAll(other) })
	cmd, out := l.shieldCmd("serve", "-iface", "va", "-pin-root", other, "-listen", "127.0.0.1:9471")
	require.Error(t, cmd.Run(), "a second serve on va under another pin root exited 0:\n%s", out)
	var pins []string
	filepath.WalkDir(other, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			pins = append(pins, p)
		}
		return nil
	})
	assert.Empty(t, pins, "the failed attach left %d pins: %v\n%s", len(pins), pins, out)
}

// envSquat makes the test binary, run as nobody, the squatter of
// TestSquattedPortNeitherStealsTokenNorUnprotects: it binds ADDR, answers
// every request 200 with an empty JSON list, and prints each request's
// method, path and Authorization header.
const envSquat = "SHIELD_TEST_SQUAT"

func squat(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("squat:", err)
		return
	}
	fmt.Println("squatting", ln.Addr())
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("request %s %s authorization=%q\n", r.Method, r.URL.Path, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"list":"deny","prefixes":[]}`)
	}))
}

// TestSquattedPortNeitherStealsTokenNorUnprotects (issue 23, finding 4):
// with serve down, nobody bound 127.0.0.1:9470; `shield deny add` sent it
// the bearer token and printed "added 0 new prefixes", and a serve
// started then failed with "nothing was attached". Now the CLI talks to a
// local service only through its admin socket (root's directory, root's
// peer credentials) and sends the squatter nothing; serve attaches first,
// says "API DOWN", serves the admin socket, and takes the port when it is
// free.
func TestSquattedPortNeitherStealsTokenNorUnprotects(t *testing.T) {
	l := newLab(t, "squat")
	bin := testutil.NobodyBinary(t)
	sq := exec.Command("nsenter", "--net=/run/netns/"+l.edge.Name, "--setuid=65534", "--setgid=65534", bin)
	sq.Env = append(os.Environ(), envSquat+"="+api.DefaultListen)
	sqOut := &syncBuffer{}
	sq.Stdout, sq.Stderr = sqOut, sqOut
	require.NoError(t, sq.Start())
	sqDone := make(chan error, 1)
	go func() { sqDone <- sq.Wait() }()
	t.Cleanup(func() { sq.Process.Kill(); <-sqDone })
	waitFor(t, "the squatter to bind "+api.DefaultListen, func() bool { return strings.Contains(sqOut.String(), "squatting") })

	// Serve is down: the CLI must refuse, and send nothing.
	cli := func(args ...string) (string, error) {
		cmd, out := l.shieldCmd(args...)
		err := cmd.Run()
		return out.String(), err
	}
	out, err := cli("deny", "add", "-token-file", l.tokenFile, "198.18.0.3/32")
	assert.Error(t, err, "deny add with serve down and the port squatted exited 0:\n%s", out)
	assert.NotContains(t, out, "added", "deny add reported success to a squatter")
	out, err = cli("status", "-token-file", l.tokenFile)
	assert.Error(t, err, "status with serve down and the port squatted exited 0:\n%s", out)
	assert.NotContains(t, sqOut.String(), "request", "the squatter was sent requests")

	// Serve starts: attached, loud about the API, managed through the
	// admin socket.
	cmd, sOut := l.shieldCmd("serve", "-iface", "va", "-pin-root", l.pinRoot, "-token-file", l.tokenFile)
	require.NoError(t, cmd.Start())
	s := &service{cmd: cmd, out: sOut, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	s.waitLog(t, "API DOWN")
	ok, _ := xdpAttached(t, l)
	require.True(t, ok, "serve with its API port squatted left va unprotected:\n%s", sOut)
	out, err = cli("deny", "add", "-token-file", l.tokenFile, "198.18.0.3/32")
	require.NoError(t, err, "deny add through the admin socket:\n%s\n%s", out, sOut)
	assert.Contains(t, out, "added 1 new prefixes")
	out, err = cli("deny", "list")
	require.NoError(t, err, out)
	assert.Equal(t, "198.18.0.3/32\n", out)
	assert.NotContains(t, sqOut.String(), "request", "the squatter was sent requests")

	// The port freed, the API follows.
	sq.Process.Kill()
	<-sqDone
	sqDone <- nil
	s.waitLog(t, "API up")
	_, err = l.client.Limits(context.Background())
	require.NoError(t, err, "the API on %s after the squatter left:\n%s", api.DefaultListen, sOut)
}

// plainCmd runs this test binary as `shield ARGS...` in the test's own
// namespaces.
func plainCmd(args ...string) (*exec.Cmd, *syncBuffer) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envAsMain+"=1")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}

// TestExposedAPIRefusedWithoutProtection (issue 10, finding 6): a listener
// beyond loopback without TLS and the token on reads is refused before
// anything is attached; with them, a remote peer needs the token over TLS.
func TestExposedAPIRefusedWithoutProtection(t *testing.T) {
	l := newLab(t, "expose")
	cmd, out := l.shieldCmd("serve", "-iface", "va", "-pin-root", l.pinRoot, "-token-file", l.tokenFile,
		"-listen", "198.18.0.1:9470")
	assert.Error(t, cmd.Run(), "serve -listen 198.18.0.1:9470 without TLS exited 0, want a refusal:\n%s", out)
	assert.Contains(t, out.String(), "beyond loopback", "serve's refusal does not say why:\n%s", out)
	ok, _ := xdpAttached(t, l)
	assert.False(t, ok, "the refused serve attached XDP to va:\n%s", out)

	// Protected: TLS, reads behind the token.
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t, netip.MustParseAddr("198.18.0.1"))
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	cfgFile := filepath.Join(dir, "shield.toml")
	for f, b := range map[string][]byte{cert: certPEM, key: keyPEM, cfgFile: []byte("[api]\nauth_reads = true\n")} {
		require.NoError(t, os.WriteFile(f, b, 0o600))
	}
	cmd, out = l.shieldCmd("serve", "-config", cfgFile, "-iface", "va", "-pin-root", l.pinRoot, "-token-file", l.tokenFile,
		"-listen", "198.18.0.1:9470", "-tls-cert", cert, "-tls-key", key)
	require.NoError(t, cmd.Start())
	s := &service{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := l.storm.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	remote := &client.Client{Base: "https://198.18.0.1:9470", HTTP: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
	waitFor(t, "the TLS API to answer", func() bool {
		_, err := remote.Info(context.Background())
		var ae *client.Error
		return errors.As(err, &ae)
	})
	_, err := remote.Info(context.Background())
	assert.Error(t, err, "a remote peer read /v1/info without the token")
	remote.Token = testToken
	_, err = remote.Info(context.Background())
	assert.NoError(t, err, "a remote peer with the token over TLS")
	plain := &client.Client{Base: "http://198.18.0.1:9470", Token: testToken, HTTP: &http.Client{Transport: &http.Transport{DialContext: tr.DialContext}, Timeout: 5 * time.Second}}
	_, err = plain.Info(context.Background())
	assert.Error(t, err, "the API answered plain HTTP beside TLS")
}

// selfSigned makes a certificate for ip and its key, PEM-encoded.
func selfSigned(t *testing.T, ip netip.Addr) (certPEM, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xdpshield test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{ip.AsSlice()}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	require.NoError(t, err)
	kd, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// TestListChangeAtomicAcrossKill (issue 10, finding 4; issue 23, finding
// 8): kill -9 of the service while it writes a batch of 60,000 deny
// prefixes. After the restart the batch is in force whole or not at all.
func TestListChangeAtomicAcrossKill(t *testing.T) {
	l := newLab(t, "kill")
	cfg := filepath.Join(t.TempDir(), "shield.toml")
	require.NoError(t, os.WriteFile(cfg, []byte("[api]\nmax_body_bytes = 4194304\n"), 0o600))
	s1 := l.serve(t, "-config", cfg)
	const n = 60000
	batch := make([]string, n)
	for i := range batch {
		batch[i] = netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}).String() + "/32"
	}
	// The two generations of the IPv4 verdict trie, watched from here,
	// both empty (no list, own addresses inline): the first entry in
	// either means the service is writing the batch.
	var tries []*ebpf.Map
	waitFor(t, "the pinned verdict tries", func() bool {
		for _, m := range tries {
			m.Close()
		}
		tries = nil
		for _, name := range []string{bpf.ShieldMapLists4, bpf.ShieldMapLists4B} {
			ms, _ := filepath.Glob(filepath.Join(l.pinRoot, "*", "va", name))
			if len(ms) == 0 {
				ms = []string{filepath.Join(l.pinRoot, "va", name)}
			}
			m, err := ebpf.LoadPinnedMap(ms[0], nil)
			if err != nil {
				return false
			}
			tries = append(tries, m)
		}
		return true
	})
	defer func() {
		for _, m := range tries {
			m.Close()
		}
	}()
	written := func() bool {
		var k []byte
		for _, m := range tries {
			if m.NextKey(nil, &k) == nil {
				return true
			}
		}
		return false
	}
	go l.client.Add(context.Background(), lists.DenyList, batch)
	deadline := time.Now().Add(30 * time.Second)
	for !written() {
		require.False(t, time.Now().After(deadline), "the batch did not start within 30 s")
	}
	require.NoError(t, s1.cmd.Process.Kill())
	<-s1.done
	s1.done <- nil

	s2 := l.serve(t, "-config", cfg)
	got, err := l.client.List(context.Background(), lists.DenyList)
	require.NoError(t, err)
	inForce := 0
	for _, p := range got.Prefixes {
		if strings.HasPrefix(p, "198.19.") {
			inForce++
		}
	}
	switch {
	case inForce == 0:
		t.Logf("the batch was not in force when killed")
	case inForce == n:
		t.Logf("the batch was complete when killed")
	default:
		assert.Fail(t, fmt.Sprintf("after kill -9 during a batch of %d deny prefixes, %d are in force: want all or none\n%s", n, inForce, s2.out))
	}
	t.Logf("kill -9 during the batch: %d of %d in force after the restart", inForce, n)
}

// TestInterfaceDeletedAndRecreated (issue 10, finding 3): after `ip link
// del` the service kept saying "attached". Now it reports unhealthy (health
// endpoint, metric, log line) while the interface is gone, and attaches the
// program again, with its maps, when the interface comes back.
func TestInterfaceDeletedAndRecreated(t *testing.T) {
	l := newLab(t, "relink")
	s := l.serve(t)
	ctx := context.Background()
	_, err := l.client.Add(ctx, lists.DenyList, []string{"198.18.0.3/32"})
	require.NoError(t, err)
	health := func() api.HealthResponse {
		h, err := l.client.Health(ctx)
		require.NoError(t, err, "GET /v1/health")
		return h
	}
	h := health()
	require.True(t, h.Healthy, "health before the interface went = %+v, want healthy", h)
	require.NoError(t, l.edge.Do(func() error {
		lk, err := netlink.LinkByName("va")
		if err != nil {
			return err
		}
		return netlink.LinkDel(lk)
	}))
	waitFor(t, "the service to report the interface gone", func() bool { return !health().Healthy })
	m, err := l.client.Metrics(ctx)
	if assert.NoError(t, err, "metrics while the interface is gone") {
		assert.Contains(t, m, `shield_attached{iface="va"} 0`, "metrics while the interface is gone")
	}
	in, err := l.client.Info(ctx)
	if assert.NoError(t, err, "/v1/info while the interface is gone") {
		assert.False(t, in.Healthy, "/v1/info while the interface is gone = %+v; want healthy false", in)
	}
	s.waitLog(t, "NOT PROTECTING")

	// The interface comes back: the program follows, with its deny list.
	require.NoError(t, topo.Veth(l.edge, "va", l.storm, "vb"))
	for _, a := range []struct {
		ns   *topo.NS
		dev  string
		cidr string
	}{{l.edge, "va", "198.18.0.1/24"}, {l.storm, "vb", "198.18.0.2/24"}, {l.storm, "vb", "198.18.0.3/24"}} {
		require.NoError(t, a.ns.AddAddr(a.dev, a.cidr))
	}
	waitFor(t, "the service to protect the new interface", func() bool { return health().Healthy })
	ok, _ := xdpAttached(t, l)
	require.True(t, ok, "health is back but va has no XDP program")
	before := denyDrops(t, l)
	f := l.sender(t, "198.18.0.3", 9999, time.Millisecond, 20)
	f.wg.Wait()
	waitFor(t, "deny drops on the new interface", func() bool { return denyDrops(t, l) >= before+uint64(f.sent.Load()) })
}

// TestServeRefusesLoopback (issue 10, finding 7): with the shield on lo,
// deleting the loopback allow entry and setting every limit to 1 locked the
// operator out of the API on lo. Serve refuses a loopback interface.
func TestServeRefusesLoopback(t *testing.T) {
	l := newLab(t, "lo")
	l.serveRefused(t, "loopback", "lo")
	ok, _ := xdpAttachedOn(t, l, "lo")
	assert.False(t, ok, "XDP attached to lo")
	l.edge.Do(func() error { return pin.Detach(l.pinRoot, "lo") })
}

// TestServeRefusesLinkOfRenamedInterface (issue 10, finding 1, within one
// namespace): the pinned link protects an interface that was renamed, and a
// new interface took the old name. Serve must neither unpin the live link
// nor adopt it for the wrong interface.
func TestServeRefusesLinkOfRenamedInterface(t *testing.T) {
	l := newLab(t, "rename")
	s1 := l.serve(t)
	s1.stop(t)
	require.NoError(t, l.edge.Do(func() error {
		va, err := netlink.LinkByName("va")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetDown(va); err != nil {
			return err
		}
		if err := netlink.LinkSetName(va, "vc"); err != nil {
			return err
		}
		return netlink.LinkSetUp(va)
	}))
	require.NoError(t, topo.Veth(l.edge, "va", l.storm, "vd"))
	out := l.serveRefused(t, "renamed", "va")
	ok, _ := xdpAttachedOn(t, l, "vc")
	assert.True(t, ok, "the renamed interface vc lost its program:\n%s", out)
}

// serveRefused runs serve on iface and wants it to exit with an error whose
// output says want within 10 s; it returns the output.
func (l *lab) serveRefused(t *testing.T, want, iface string) string {
	t.Helper()
	cmd, out := l.shieldCmd("serve", "-iface", iface, "-pin-root", l.pinRoot, "-token-file", l.tokenFile)
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		assert.Error(t, err, "serve -iface %s: want a refusal saying %q:\n%s", iface, want, out)
		assert.Contains(t, out.String(), want, "serve -iface %s = %v, want a refusal saying %q", iface, err, want)
	case <-time.After(10 * time.Second):
		cmd.Process.Signal(os.Interrupt)
		<-done
		assert.Fail(t, fmt.Sprintf("serve -iface %s was still serving after 10 s, want a refusal saying %q:\n%s", iface, want, out))
	}
	return out.String()
}
