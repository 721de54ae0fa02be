package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"xdpshield/shield"
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
	if !okA {
		t.Fatalf("after the first service stopped, va in %s has no XDP program", a.edge.Name)
	}
	s2 := b.serve(t)
	if ok, mode := xdpAttached(t, a); !ok || mode != modeA {
		t.Errorf("after a service started in %s, va in %s has XDP attached %v (mode %d), want true (mode %d): taken over\n%s",
			b.edge.Name, a.edge.Name, ok, mode, modeA, s2.out)
	}
	if ok, _ := xdpAttached(t, b); !ok {
		t.Errorf("va in %s has no XDP program though its service runs", b.edge.Name)
	}
	if out := s2.out.String(); strings.Contains(out, "adopted") || strings.Contains(out, "attaching afresh") {
		t.Errorf("the second namespace's service adopted or unpinned the first's link:\n%s", out)
	}
}

// TestDetachRefusesNonBPFFS (finding 2): `shield detach -pin-root DIR` on an
// ordinary directory must delete nothing.
func TestDetachRefusesNonBPFFS(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim", "a.conf")
	if err := os.MkdirAll(filepath.Dir(victim), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, out := plainCmd("detach", "-iface", "victim", "-pin-root", dir)
	if err := cmd.Run(); err == nil {
		t.Errorf("shield detach -pin-root %s (not bpffs) exited 0, want an error:\n%s", dir, out)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("detach on a non-bpffs directory removed %s: %v\n%s", victim, err, out)
	}
	if !strings.Contains(out.String(), "not on a bpf filesystem") {
		t.Errorf("detach output = %q, want it to say the directory is not on a bpf filesystem", out)
	}
}

// TestFailedAttachLeavesNoOrphanPins (finding 7): a second service on the
// same interface under another pin root fails to attach (the first one's
// program is there); it must leave no pins behind.
func TestFailedAttachLeavesNoOrphanPins(t *testing.T) {
	l := newLab(t, "orphan")
	l.serve(t)
	other := l.pinRoot + "-other"
	if err := shield.EnsureBPFFS(other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	cmd, out := l.shieldCmd("serve", "-iface", "va", "-pin-root", other, "-listen", "127.0.0.1:9471")
	if err := cmd.Run(); err == nil {
		t.Fatalf("a second serve on va under another pin root exited 0:\n%s", out)
	}
	var pins []string
	filepath.WalkDir(other, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			pins = append(pins, p)
		}
		return nil
	})
	if len(pins) > 0 {
		t.Errorf("the failed attach left %d pins: %v\n%s", len(pins), pins, out)
	}
}

// TestServeBindsListenerBeforeAttaching (finding 7): when the API address
// cannot be bound, serve must fail before it attaches anything.
func TestServeBindsListenerBeforeAttaching(t *testing.T) {
	l := newLab(t, "bind")
	var ln net.Listener
	if err := l.edge.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:9470")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd, out := l.shieldCmd("serve", "-iface", "va", "-pin-root", l.pinRoot, "-listen", "127.0.0.1:9470")
	if err := cmd.Run(); err == nil {
		t.Fatalf("serve with its address taken exited 0:\n%s", out)
	}
	if ok, _ := xdpAttached(t, l); ok {
		t.Errorf("serve failed to listen but left XDP attached to va:\n%s", out)
	}
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
