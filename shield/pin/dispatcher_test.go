package pin

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// TestProbeDispatcher: the product's probe of freplace of a dispatcher's
// slot agrees with the lab's (internal/features), and a refusal names
// ErrFreplace and the kernel's errno (EPERM on a host kernel that refuses
// BPF_PROG_TYPE_EXT).
func TestProbeDispatcher(t *testing.T) {
	testutil.Root(t)
	err := ProbeDispatcher()
	if os.Getenv(features.Env) == "" {
		assert.Equal(t, features.Freplace.Check() == nil, err == nil, "ProbeDispatcher: %v; features: %v", err, features.Freplace.Check())
	}
	if err == nil {
		t.Log("this kernel allows freplace of a dispatcher's slot")
		return
	}
	t.Logf("ProbeDispatcher: %v", err)
	require.ErrorIs(t, err, ErrFreplace)
	var errno unix.Errno
	require.ErrorAs(t, err, &errno, "the kernel's errno")
	assert.Contains(t, err.Error(), "("+unix.ErrnoName(errno)+")")
}

// dispatcherLab is a veth between two namespaces, edge (dx0, 198.18.0.1)
// and peer (dx1, 198.18.0.2 and .3), with a pin root of its own.
type dispatcherLab struct {
	edge, peer *topo.NS
	ifindex    int
	root       string
}

const (
	dxEdge   = "dx0"
	dxPeer   = "dx1"
	dxDenied = 3 // 198.18.0.3, on the shield's deny list
	dxPassed = 2 // 198.18.0.2
)

func newDispatcherLab(t *testing.T, name string) *dispatcherLab {
	t.Helper()
	require.NoError(t, pinfs.EnsureBPFFS("/sys/fs/bpf"))
	if _, err := os.Stat(libxdpDir()); os.IsNotExist(err) {
		t.Cleanup(func() { os.Remove(libxdpDir()) })
	}
	l := &dispatcherLab{root: filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-%s-%d", name, os.Getpid()))}
	t.Cleanup(func() { os.RemoveAll(l.root) })
	var err error
	l.edge, err = topo.New(name)
	require.NoError(t, err)
	t.Cleanup(func() { l.edge.Close() })
	l.peer, err = topo.New(name + "-peer")
	require.NoError(t, err)
	t.Cleanup(func() { l.peer.Close() })
	require.NoError(t, topo.Veth(l.edge, dxEdge, l.peer, dxPeer))
	require.NoError(t, l.edge.AddAddr(dxEdge, "198.18.0.1/24"))
	require.NoError(t, l.peer.AddAddr(dxPeer, "198.18.0.2/24"))
	require.NoError(t, l.peer.AddAddr(dxPeer, "198.18.0.3/24"))
	l.ifindex, err = l.edge.LinkIndex(dxEdge)
	require.NoError(t, err)
	return l
}

func (l *dispatcherLab) attach(t *testing.T, mode Mode) (*Attachment, error) {
	t.Helper()
	return l.attachMode(t, mode, true)
}

// attachMode attaches the shield in dispatcher mode, or alone.
func (l *dispatcherLab) attachMode(t *testing.T, mode Mode, dispatcher bool) (*Attachment, error) {
	t.Helper()
	var a *Attachment
	err := l.edge.Do(func() (err error) {
		// AdoptUnverified: the second Attach adopts the first's pins on
		// kernels without namespace cookies (before 5.14).
		a, err = Attach(AttachOptions{Iface: dxEdge, PinRoot: l.root, Mode: mode, Dispatcher: dispatcher,
			AdoptUnverified: true, Load: shield.Options{TableSize: 4096}})
		return err
	})
	return a, err
}

func (l *dispatcherLab) find(t *testing.T) *LibxdpDispatcher {
	t.Helper()
	var d *LibxdpDispatcher
	require.NoError(t, l.edge.Do(func() (err error) { d, err = FindLibxdpDispatcher(l.ifindex); return err }))
	return d
}

func (l *dispatcherLab) attached(t *testing.T) ebpf.ProgramID {
	t.Helper()
	var id ebpf.ProgramID
	require.NoError(t, l.edge.Do(func() (err error) { id, err = attachedID(l.ifindex); return err }))
	return id
}

// send sends n UDP datagrams from 198.18.0.<from> to the edge's discard
// port, through an unconnected socket (a connected one would stop at the
// edge's port unreachable).
func (l *dispatcherLab) send(t *testing.T, from byte, n int) {
	t.Helper()
	require.NoError(t, l.peer.Do(func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(198, 18, 0, from)})
		if err != nil {
			return err
		}
		defer c.Close()
		for range n {
			if _, err := c.WriteToUDP([]byte("dispatcher"), &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 9}); err != nil {
				return err
			}
		}
		return nil
	}))
}

// resolve has the peer resolve the edge's address (a frame from each
// source, then a pause) so that no frame counted waits on ARP, which
// keeps only the last few.
func (l *dispatcherLab) resolve(t *testing.T) {
	t.Helper()
	l.send(t, dxPassed, 1)
	l.send(t, dxDenied, 1)
	time.Sleep(200 * time.Millisecond)
}

// names are the dispatcher's components' names and priorities, in run
// order; the shield's program is "shield" whichever variant is loaded
// (shield_compat before 5.12).
func names(d *LibxdpDispatcher) []string {
	var out []string
	for _, c := range d.Components {
		name := c.Name
		if slices.Contains(shieldProgNames, name) {
			name = "shield"
		}
		out = append(out, fmt.Sprintf("%s/%d", name, c.RunPrio))
	}
	return out
}

// TestAttachDispatcherRefused: where the kernel refuses freplace of XDP,
// dispatcher mode is refused with ErrFreplace and the errno, and nothing is
// attached or pinned (the shield can still attach alone).
func TestAttachDispatcherRefused(t *testing.T) {
	testutil.Root(t)
	if ProbeDispatcher() == nil {
		// The product's own probe decides whether Attach refuses.
		t.Skip("this kernel allows freplace of XDP: TestDispatcherJoin tests the mode")
	}
	lab := newDispatcherLab(t, "dxrefused")
	a, err := lab.attach(t, ModeAuto)
	if err == nil {
		lab.edge.Do(a.Detach)
		a.Close()
	}
	require.Error(t, err)
	t.Logf("Attach in dispatcher mode: %v", err)
	assert.ErrorIs(t, err, ErrFreplace)
	assert.Contains(t, err.Error(), `dispatcher mode on "dx0"`)
	assert.Contains(t, err.Error(), "docs/operating.md")
	assert.Zero(t, lab.attached(t), "a program attached after the refusal")
	entries, _ := os.ReadDir(lab.root)
	assert.Empty(t, entries, "pins left after the refusal")
}

// TestAttachDispatcherOverAlone: a shield attached alone (its pinned
// link) is not turned into a dispatcher's component: dispatcher mode is
// refused, naming the link and `shield detach`, and the program stays.
func TestAttachDispatcherOverAlone(t *testing.T) {
	testutil.Root(t)
	lab := newDispatcherLab(t, "dxalone")
	a, err := lab.attachMode(t, ModeAuto, false)
	require.NoError(t, err)
	defer func() { lab.edge.Do(a.Detach); a.Close() }()
	prog := a.Program
	require.NoError(t, a.Close()) // the lock goes, the pins stay
	_, err = lab.attach(t, ModeAuto)
	require.Error(t, err)
	t.Logf("Attach in dispatcher mode over the shield alone: %v", err)
	assert.Contains(t, err.Error(), "the shield runs there alone, through the link pinned at")
	assert.Contains(t, err.Error(), "shield detach -iface dx0")
	assert.Equal(t, prog, lab.attached(t), "the program after the refusal")
}

// TestDispatcherJoin (issue 28, sharing the NIC): the shield in libxdp's
// dispatcher beside another XDP program, bpf/xdpcount.c, which counts the
// IPv4 frames that reach it by their source's last byte. The other program
// is loaded first, by the real xdp-loader (Debian's xdp-tools, libxdp
// taking bpf/dispatcher.c as its xdp-dispatcher.o) where it is installed,
// else through this package's side of the protocol. Checked:
//   - the shield joins the dispatcher before it (priority 10 against
//     libxdp's default 50, chain on XDP_PASS), `xdp-loader status` lists
//     both in that order, and both run in that order: frames of a denied
//     source are dropped by the shield and never counted, the others are;
//   - a second Attach (a restart) replaces the shield's slot in a new
//     dispatcher, keeping its state and the other program;
//   - pin.Detach (`shield detach`) leaves the other program running alone
//     in a new dispatcher, now counting the formerly denied source; the
//     old dispatcher's pins and the shield's are gone.
func TestDispatcherJoin(t *testing.T) {
	testutil.Root(t)
	testutil.Feature(t, features.Freplace)
	lab := newDispatcherLab(t, "dxjoin")
	const n = 20

	// The claim is that libxdp itself runs our dispatcher.o beside us:
	// without xdp-loader there is nothing to test it with.
	xdpLoader, lerr := exec.LookPath("xdp-loader")
	if lerr != nil {
		testutil.SkipOrFail(t, fmt.Sprintf("xdp-loader (Debian's xdp-tools) not found: %v", lerr))
	}
	status, leave := loadWithXdpLoader(t, lab, xdpLoader)
	defer leave()
	d := lab.find(t)
	require.NotNil(t, d, "no dispatcher after xdp_count was loaded")
	require.Equal(t, []string{"xdp_count/50"}, names(d))

	a, err := lab.attach(t, ModeAuto)
	require.NoError(t, err)
	defer func() {
		if a != nil {
			lab.edge.Do(a.Detach)
			a.Close()
		}
	}()
	t.Logf("shield attached in %s mode, slot %d, link %d", a.Mode, a.Slot, a.LinkID)
	_, err = a.Shield.Add(lists.DenyList, []netip.Prefix{netip.MustParsePrefix("198.18.0.3/32")})
	require.NoError(t, err)
	d = lab.find(t)
	require.NotNil(t, d, "no dispatcher after Attach")
	require.Equal(t, []string{"shield/10", "xdp_count/50"}, names(d), "components in run order")
	assert.Equal(t, uint32(1<<2|1<<31), d.Components[0].ChainCallActions)
	assert.Equal(t, a.Program, d.Components[0].Program)
	out := status()
	assert.Regexp(t, `(?m)^ => +10 +shield(_compat)? `, out, "the shield first in xdp-loader status")
	assert.Regexp(t, `(?m)^ => +50 +xdp_count `, out, "xdp_count second in xdp-loader status")
	counts := counterMap(t, d.Components[1].Program)
	defer counts.Close()

	drops := func(s *shield.Shield) uint64 {
		c, err := s.Counters()
		require.NoError(t, err)
		return c.Reason(counter.ReasonDeny)
	}
	count := func(b byte) uint64 {
		var v uint64
		require.NoError(t, counts.Lookup(uint32(b), &v))
		return v
	}
	lab.resolve(t)
	passed, dropped := count(dxPassed), drops(a.Shield)
	lab.send(t, dxPassed, n)
	lab.send(t, dxDenied, n)
	assert.Equal(t, uint64(n), count(dxPassed)-passed, "frames of the passed source counted by the second program")
	assert.Zero(t, count(dxDenied), "frames of the denied source reached the second program")
	assert.Equal(t, uint64(n), drops(a.Shield)-dropped, "denylist drops by the shield")

	// A restart: the shield's slot is replaced in a new dispatcher.
	old := d.Program
	oldProg := a.Program
	require.NoError(t, a.Close())
	// Refused, changing nothing: another mode than the dispatcher's, and
	// the shield alone where it runs in the dispatcher.
	_, err = lab.attachMode(t, ModeGeneric, true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "libxdp's dispatcher there is attached in native mode, generic was asked")
	_, err = lab.attachMode(t, ModeAuto, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the shield runs there in dispatcher mode")
	assert.Equal(t, old, lab.attached(t), "the dispatcher after the refused Attach calls")
	a, err = lab.attach(t, ModeAuto)
	require.NoError(t, err)
	assert.True(t, a.Adopted)
	assert.Equal(t, oldProg, a.OldProgram)
	d = lab.find(t)
	require.NotNil(t, d)
	assert.NotEqual(t, old, d.Program, "the same dispatcher after a restart")
	assert.Equal(t, []string{"shield/10", "xdp_count/50"}, names(d))
	assert.Equal(t, a.Program, d.Components[0].Program)
	assert.NoDirExists(t, filepath.Join(libxdpDir(), fmt.Sprintf("dispatch-%d-%d", lab.ifindex, old)))
	lab.send(t, dxDenied, n)
	assert.Zero(t, count(dxDenied), "the denied source passed the restarted shield")

	// `shield detach` (pin.Detach, the service stopped): the second
	// program alone, now seeing the denied source; the shield's pins gone.
	old = d.Program
	pinDir := a.PinDir
	require.NoError(t, a.Close())
	a = nil
	require.NoError(t, lab.edge.Do(func() error { return Detach(lab.root, dxEdge) }))
	assert.NoDirExists(t, pinDir)
	d = lab.find(t)
	require.NotNil(t, d, "the other program's dispatcher went with the shield")
	assert.Equal(t, []string{"xdp_count/50"}, names(d))
	assert.NoDirExists(t, filepath.Join(libxdpDir(), fmt.Sprintf("dispatch-%d-%d", lab.ifindex, old)))
	lab.send(t, dxDenied, n)
	assert.Equal(t, uint64(n), count(dxDenied), "the formerly denied source after Detach")
}

// counterMap opens xdp_count's counts map through its program.
func counterMap(t *testing.T, id ebpf.ProgramID) *ebpf.Map {
	t.Helper()
	return testutil.ProgramMap(t, id, func(m *ebpf.Map, _ *ebpf.MapInfo) bool {
		return m.Type() == ebpf.Array && m.MaxEntries() == 256
	})
}

// loadWithXdpLoader loads bpf/xdpcount.c with xdp-loader (native mode),
// libxdp taking bpf/dispatcher.c as its dispatcher; status runs
// `xdp-loader status` and leave unloads every program.
func loadWithXdpLoader(t *testing.T, lab *dispatcherLab, bin string) (status func() string, leave func()) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "xdp-dispatcher.o"), bpf.DispatcherObject(), 0o644))
	obj := filepath.Join(dir, "xdpcount.o")
	require.NoError(t, os.WriteFile(obj, bpf.XdpCountObject(), 0o644))
	run := func(args ...string) (string, error) {
		// nsenter keeps the mount namespace: `ip netns exec` mounts a
		// /sys of its own, without the bpffs the pins are in.
		cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + lab.edge.Name, bin}, args...)...)
		cmd.Env = append(os.Environ(), "LIBXDP_OBJECT_PATH="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("load", "-m", "native", dxEdge, obj)
	require.NoError(t, err, "xdp-loader load: %s", out)
	status = func() string {
		out, err := run("status", dxEdge)
		require.NoError(t, err, "xdp-loader status: %s", out)
		t.Logf("xdp-loader status:\n%s", out)
		return out
	}
	return status, func() {
		if out, err := run("unload", "-a", dxEdge); err != nil {
			t.Logf("xdp-loader unload: %v: %s", err, out)
		}
	}
}
