package l7

import (
	"flag"
	"testing"

	"xdpshield/internal/testutil"
)

var tryOld = flag.Bool("l7.try-old-kernel", false, "lift MinKernel to 5.10 (to diagnose older kernels)")

// TestAttachLoads loads and attaches the data plane, with no traffic: on a
// kernel that refuses it (verifier, helpers), this fails first.
func TestAttachLoads(t *testing.T) {
	testutil.Root(t)
	if *tryOld {
		MinKernel = [2]int{5, 10}
	}
	testutil.Kernel(t, MinKernel[0], MinKernel[1], "the L7 fast path (see MinKernel)")
	p, err := Compile(Config{Routes: []Route{{Name: "a", PathPrefix: "/", Backends: []string{"198.18.0.1:80"}}},
		RBAC: []Rule{{Action: "deny", Header: "X-User", Value: "x"}}, HashHeader: "X-User"})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := Attach(NewProxy(p, nil), nil)
	if err != nil {
		t.Fatalf("Attach = %v", err)
	}
	t.Logf("sockhash lookup from programs: %v; policy in the kernel: %v %s", fp.Lookup, fp.Enabled, fp.Why)
	if !fp.Enabled {
		t.Errorf("policy not held in the kernel: %s", fp.Why)
	}
	if err := fp.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}
