package l7

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/l7/internal/sock"
	"github.com/xdpshield/xdpshield/l7/policy"
)

var (
	tryOld    = flag.Bool("l7.try-old-kernel", false, "accept this kernel whatever Kernels says (to diagnose refused kernels)")
	refuse    = flag.Bool("l7.refuse", false, "refuse every kernel (Kernels empty): runs the refused kernels' tests here")
	passRedir = flag.String("l7.pass-redirect", "", "off: hand messages to the proxy with SK_PASS, not by redirect (Options.SKPass: the kernels' bugs it avoids)")
	watchFlag = flag.String("l7.watch", "", "read: a TCP relay's watcher reads the client socket (5.10's bug); nokick: it does not, and nothing runs the parser on data queued before the join")
	relayFlag = flag.String("l7.relay", "", "off: hand messages over to the client socket itself, not to a relay socket (Options.NoRelay: 6.12's and 7.2's bug it avoids); tcp: relays are TCP pairs on loopback, as on 5.10")
)

// testOptions are the fast path's Options the -l7.* flags ask for (the
// zero value, serve's, without them): any kernel with
// -l7.try-old-kernel, none with -l7.refuse.
func testOptions() Options {
	var o Options
	if *tryOld {
		ma, mi, _ := kernelSeries()
		o.Kernels = [][2]int{{ma, mi}}
	}
	if *refuse {
		o.Kernels = [][2]int{}
	}
	switch *passRedir {
	case "on", "":
	case "off":
		o.SKPass = true
	default:
		panic(fmt.Sprintf("-l7.pass-redirect=%q: want on or off", *passRedir))
	}
	switch *relayFlag {
	case "on", "":
	case "off":
		o.NoRelay = true
	case "tcp":
		o.TCPRelay = true
	default:
		panic(fmt.Sprintf("-l7.relay=%q: want on, off or tcp", *relayFlag))
	}
	switch *watchFlag {
	case "read":
		o.WatchRead = true
	case "nokick":
		o.NoKick = true
	case "":
	default:
		panic(fmt.Sprintf("-l7.watch=%q: want read or nokick", *watchFlag))
	}
	return o
}

// fastOptions are testOptions with a data plane for t alone until t
// ends (Options.Reuse): one a finished test gave back, of the same
// variant, is reset instead of loaded again. A load verifies l7_parse
// anew, about 10 s in a VM under TCG; a reset takes milliseconds
// (TestReuseIsLoad shows the two alike). Call it before what closes the
// fast path registers its cleanup: the data plane goes back after it.
func fastOptions(t testing.TB) Options {
	t.Helper()
	o := testOptions()
	k := planeKey{o.SKPass, o.NoRelay, o.TCPRelay}
	d, ok := planes.Take(k)
	if !ok {
		d = &DataPlane{}
	}
	o.Reuse = d
	t.Cleanup(func() {
		// Back unless a fast path still uses it (a test that did not
		// close its own: it is left to it).
		d.mu.Lock()
		keep := d.loaded && !d.busy
		d.mu.Unlock()
		if keep {
			planes.Give(k, d)
		}
	})
	return o
}

// planes holds the data planes finished tests gave back, by variant.
var planes testutil.Pool[planeKey, *DataPlane]

type planeKey struct{ skPass, noRelay, tcpRelay bool }

// fastKernel reports whether Attach accepts this kernel under
// testOptions.
func fastKernel() bool {
	ok, _ := testOptions().kernelServes()
	return ok
}

// checkRefused wants Attach to refuse this kernel cleanly: an error
// wrapping ErrKernelRefused, no fast path, the proxy left alone (it serves
// every request itself). It returns Attach's error.
func checkRefused(t testing.TB) error {
	t.Helper()
	p, err := policy.Compile(policy.Config{Routes: []policy.Route{{Name: "a", PathPrefix: "/", Backends: []string{"198.18.0.1:80"}}}})
	require.NoError(t, err)
	px := NewProxy(p, nil)
	fp, err := Attach(px, nil, testOptions())
	if fp != nil {
		fp.Close()
	}
	require.False(t, fp != nil || !errors.Is(err, ErrKernelRefused) || px.fast != nil,
		"Attach on a kernel not among %v = %v, %v (proxy's fast path %v); want nil and an error wrapping ErrKernelRefused, the proxy alone",
		testOptions().kernels(), fp, err, px.fast)
	return err
}

// needFast skips a test of the fast path itself on a kernel Attach
// refuses, once it has checked the refusal is clean; the fallback there
// is what TestL7Differential, FuzzL7 and TestServerWithoutFastPath test.
func needFast(t testing.TB) {
	t.Helper()
	if fastKernel() {
		return
	}
	err := checkRefused(t)
	t.Skipf("the fast path is refused here (checked: %v); the fallback is tested by TestL7Differential, FuzzL7 and TestServerWithoutFastPath", err)
}

// TestAttachLoads loads and attaches the data plane, with no traffic: on a
// kernel that refuses it (verifier, helpers), this fails first. On a kernel
// Attach refuses (not among Kernels) it wants the refusal, clean.
func TestAttachLoads(t *testing.T) {
	testutil.Root(t)
	if !fastKernel() {
		t.Logf("refused as it should be: %v", checkRefused(t))
		return
	}
	p, err := policy.Compile(policy.Config{Routes: []policy.Route{{Name: "a", PathPrefix: "/", Backends: []string{"198.18.0.1:80"}}},
		RBAC: []policy.Rule{{Action: "deny", Header: "X-User", Value: "x"}}, HashHeader: "X-User"})
	require.NoError(t, err)
	fp, err := Attach(NewProxy(p, nil), nil, testOptions())
	require.NoError(t, err, "Attach")
	t.Logf("sockhash lookup from programs: %v; passed by redirect: %v; through a relay: %v (TCP: %v); policy in the kernel: %v %s",
		fp.Lookup, fp.PassRedirect, fp.Relay, fp.RelayTCP, fp.Enabled, fp.Why)
	assert.False(t, *passRedir == "" && !fp.PassRedirect, "the fast path hands messages to the proxy with SK_PASS by default, want the redirect (PassRedirect): SK_PASS loses tails and stalls connections")
	assert.False(t, *relayFlag == "" && !fp.Relay, "the fast path hands messages over to the client socket itself, want a relay (Relay; unix, or TCP on loopback where the kernel takes no unix socket into a sockhash): 6.12 and 7.2 lose tails otherwise")
	assert.False(t, *watchFlag == "" && fp.RelayTCP && !fp.watchPoll, "with TCP relays the watchers read the client sockets, want them to wait for POLLRDHUP (watchPoll): 5.10 reads the receive queue raw, bytes the parser never saw")
	uerr := sock.UnixIntoSockhash()
	assert.False(t, *relayFlag == "" && uerr == nil && fp.RelayTCP, "the relays are TCP pairs although the kernel takes unix sockets into a sockhash, want unix ones")
	assert.True(t, fp.Enabled, "policy not held in the kernel: %s", fp.Why)
	assert.NoError(t, fp.Close(), "Close")
}

// TestInVMMatrix: the package is in the VM matrix's packages (the
// Makefile's VMTEST_PKGS and ci/vmtest.sh's default), so its tests run on
// every kernel, the refused ones included.
func TestInVMMatrix(t *testing.T) {
	for _, c := range []struct{ file, re string }{
		{"Makefile", `(?m)^VMTEST_PKGS \?= (.*)$`},
		{"ci/vmtest.sh", `(?m)^PKGS="\$\{VMTEST_PKGS:-(.*)\}"$`},
	} {
		pkgs := testutil.RepoFields(t, "..", c.file, c.re)
		assert.False(t, !slices.Contains(pkgs, "./l7") && !slices.Contains(pkgs, "./l7/..."), "%s: matrix packages = %q, want ./l7 among them", c.file, pkgs)
	}
}
