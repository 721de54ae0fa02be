package pin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/shield"
)

// TestParseLibxdpConfig: the dispatcher's configuration as protocol.org
// (xdp-project/xdp-tools, "Dispatcher format") lays it out, version 2 with
// the magic byte and version 1 without.
func TestParseLibxdpConfig(t *testing.T) {
	v2 := make([]byte, libxdpConfigV2)
	v2[0], v2[1], v2[2] = 236, 2, 2
	le := binary.LittleEndian
	le.PutUint32(v2[4:], 1<<2|1<<31) // XDP_PASS and XDP_DISPATCHER_RETVAL
	le.PutUint32(v2[8:], 1<<2|1<<31)
	le.PutUint32(v2[44:], 10) // run_prios
	le.PutUint32(v2[48:], 50)
	d, err := parseLibxdpConfig(v2)
	require.NoError(t, err)
	assert.Equal(t, 2, d.Version)
	assert.Equal(t, []LibxdpComponent{
		{Slot: 0, RunPrio: 10, ChainCallActions: 1<<2 | 1<<31},
		{Slot: 1, RunPrio: 50, ChainCallActions: 1<<2 | 1<<31},
	}, d.Components)

	v1 := make([]byte, libxdpConfigV1)
	v1[0], v1[4], v1[44] = 1, 1<<2, 20
	d, err = parseLibxdpConfig(v1)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Version)
	assert.Equal(t, []LibxdpComponent{{Slot: 0, RunPrio: 20, ChainCallActions: 1 << 2}}, d.Components)

	v3 := append([]byte(nil), v2...)
	v3[1] = 3
	_, err = parseLibxdpConfig(v3)
	assert.ErrorContains(t, err, "unknown dispatcher version 3")
	v2[2] = 11
	_, err = parseLibxdpConfig(v2)
	assert.ErrorContains(t, err, "11 programs enabled")
}

// libxdpDispatcherObj is libxdp's dispatcher as Debian's libxdp1 ships it
// (pulled in by xdp-tools, ci/deps.sh).
const libxdpDispatcherObj = "/usr/lib/x86_64-linux-gnu/bpf/xdp-dispatcher.o"

// probeFreplace loads libxdp's dispatcher and an extension program
// replacing its first slot, as libxdp's own compatibility check does: a
// kernel (or a build of one) without freplace of XDP refuses, and libxdp
// then loads a program alone, without its dispatcher.
func probeFreplace(t *testing.T) error {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(libxdpDispatcherObj)
	require.NoError(t, err)
	coll, err := ebpf.NewCollection(spec)
	require.NoError(t, err, "load libxdp's dispatcher")
	defer coll.Close()
	ext, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Extension, AttachTarget: coll.Programs["xdp_dispatcher"],
		AttachTo: "prog0", License: "GPL", Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		var errno unix.Errno
		errors.As(err, &errno)
		return fmt.Errorf("%sxdp_freplace unavailable (%s): %w", features.Prefix, features.ErrnoName(errno), err)
	}
	ext.Close()
	return nil
}

// TestAttachNamesLibxdpDispatcher (issue 28, sharing the NIC): the shield
// joins libxdp's dispatcher only in dispatcher mode (docs/operating.md,
// "Sharing the interface"); alone, it refuses an interface where libxdp's
// tools run, naming what runs there and how to unload it, and changes
// nothing. On a veth in a namespace, with Debian's xdp-tools 1.3.1:
//   - xdp-filter first: its dispatcher where the kernel has freplace, else
//     (libxdp falls back) its program alone; Attach refuses, naming it,
//     and xdp-loader status still lists it;
//   - libxdp's dispatcher object (Debian's xdp-dispatcher.o, configured as
//     libxdp configures it: one slot, priority 50, chain on XDP_PASS)
//     attached through netlink as libxdp attaches it: FindLibxdpDispatcher
//     reads it and Attach names it;
//   - the shield first: xdp-filter cannot load and the shield stays.
func TestAttachNamesLibxdpDispatcher(t *testing.T) {
	testutil.Root(t)
	testutil.HostOnly(t, "Debian's xdp-tools are on the host, not in the VMs' initramfs")
	for _, bin := range []string{"xdp-filter", "xdp-loader", "nsenter", libxdpDispatcherObj} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.SkipOrFail(t, fmt.Sprintf("%s not installed (ci/deps.sh installs xdp-tools): %v", bin, err))
		}
	}
	require.NoError(t, pinfs.EnsureBPFFS("/sys/fs/bpf"))
	// libxdp and xdp-filter leave empty directories on bpffs: the ones
	// this test made go at the end (removed only when empty).
	for _, d := range []string{"/sys/fs/bpf/xdp", "/sys/fs/bpf/xdp-filter", "/sys/fs/bpf/xdp-filter/programs"} {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			t.Cleanup(func() { os.Remove(d) })
		}
	}
	freplace := probeFreplace(t)

	edge, err := topo.New("libxdp")
	require.NoError(t, err)
	t.Cleanup(func() { edge.Close() })
	peer, err := topo.New("libxdp-peer")
	require.NoError(t, err)
	t.Cleanup(func() { peer.Close() })
	const iface = "lx0"
	require.NoError(t, topo.Veth(edge, iface, peer, "lx1"))
	ifindex, err := edge.LinkIndex(iface)
	require.NoError(t, err)

	// nsenter keeps the mount namespace (`ip netns exec` would mount a
	// fresh /sys, without the bpffs libxdp pins in).
	inEdge := func(name string, args ...string) (string, error) {
		cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + edge.Name, name}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	attachedID := func(t *testing.T) ebpf.ProgramID {
		t.Helper()
		var id ebpf.ProgramID
		require.NoError(t, edge.Do(func() error {
			l, err := netlink.LinkByIndex(ifindex)
			if err == nil && l.Attrs().Xdp != nil {
				id = ebpf.ProgramID(l.Attrs().Xdp.ProgId)
			}
			return err
		}))
		return id
	}
	find := func(t *testing.T) *LibxdpDispatcher {
		t.Helper()
		var d *LibxdpDispatcher
		require.NoError(t, edge.Do(func() (err error) { d, err = FindLibxdpDispatcher(ifindex); return err }))
		return d
	}
	root := filepath.Join("/sys/fs/bpf", fmt.Sprintf("xdpshield-test-libxdp-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(root) })
	refused := func(t *testing.T, what string, wants ...string) {
		t.Helper()
		err := edge.Do(func() error {
			a, err := Attach(AttachOptions{Iface: iface, PinRoot: root, Load: shield.Options{TableSize: 4096}})
			if err == nil {
				a.Detach()
				a.Close()
			}
			return err
		})
		require.Error(t, err, "Attach beside %s", what)
		t.Logf("Attach beside %s: %v", what, err)
		for _, want := range wants {
			assert.Contains(t, err.Error(), want, "Attach error beside %s", what)
		}
	}

	t.Run("xdp-filter first", func(t *testing.T) {
		out, err := inEdge("xdp-filter", "load", "-m", "native", iface)
		require.NoError(t, err, "xdp-filter load: %s", out)
		defer inEdge("xdp-filter", "unload", iface)
		id := attachedID(t)
		require.NotZero(t, id, "nothing attached after xdp-filter load")
		d := find(t)
		var name string
		if freplace != nil {
			require.Nil(t, d, "a dispatcher on a kernel without freplace: %+v", d)
			p, err := ebpf.NewProgramFromID(id)
			require.NoError(t, err)
			info, err := p.Info()
			p.Close()
			require.NoError(t, err)
			name = info.Name
			refused(t, "xdp-filter's program", fmt.Sprintf("program %d %q", id, name))
		} else {
			require.NotNil(t, d, "FindLibxdpDispatcher after xdp-filter load")
			assert.Equal(t, id, d.Program)
			assert.Equal(t, libxdpVersion, d.Version)
			require.Len(t, d.Components, 1)
			name = d.Components[0].Name
			assert.NotZero(t, d.Components[0].Program)
			assert.NotZero(t, d.Components[0].ChainCallActions&(1<<2), "xdp-filter's program chains on XDP_PASS")
			refused(t, "xdp-filter's dispatcher", "libxdp's dispatcher", name, "xdp-loader unload -a "+iface, "docs/operating.md")
		}
		assert.True(t, strings.HasPrefix(name, "xdpfilt_"), "%q, want xdp-filter's program", name)
		assert.Equal(t, id, attachedID(t), "the program attached after the refused Attach")
		out, err = inEdge("xdp-loader", "status", iface)
		require.NoError(t, err, "xdp-loader status: %s", out)
		assert.Contains(t, out, name, "xdp-loader status after the refused Attach")
		if freplace != nil {
			t.Skipf("xdp-filter's own dispatcher not checked: %v (libxdp loaded its program alone)", freplace)
		}
	})

	t.Run("libxdp's dispatcher object", func(t *testing.T) {
		spec, err := ebpf.LoadCollectionSpec(libxdpDispatcherObj)
		require.NoError(t, err)
		conf := make([]byte, libxdpConfigV2)
		conf[0], conf[1], conf[2] = libxdpMagic, libxdpVersion, 1
		binary.LittleEndian.PutUint32(conf[4:], 1<<2|1<<31) // XDP_PASS, XDP_DISPATCHER_RETVAL
		binary.LittleEndian.PutUint32(conf[44:], 50)        // libxdp's default run priority
		// conf is static, no Variable: its .rodata is the whole value.
		rodata := spec.Maps[".rodata"]
		require.NotNil(t, rodata, "no .rodata in %s", libxdpDispatcherObj)
		require.Len(t, rodata.Contents, 1)
		require.Len(t, rodata.Contents[0].Value, libxdpConfigV2, "libxdp's configuration")
		rodata.Contents[0].Value = conf
		coll, err := ebpf.NewCollection(spec)
		require.NoError(t, err)
		defer coll.Close()
		disp := coll.Programs["xdp_dispatcher"]
		require.NoError(t, edge.Do(func() error {
			l, err := netlink.LinkByIndex(ifindex)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, disp.FD(), nl.XDP_FLAGS_DRV_MODE)
		}))
		defer edge.Do(func() error {
			l, err := netlink.LinkByIndex(ifindex)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, -1, nl.XDP_FLAGS_DRV_MODE)
		})
		info, err := disp.Info()
		require.NoError(t, err)
		id, _ := info.ID()
		d := find(t)
		require.NotNil(t, d, "FindLibxdpDispatcher on libxdp's dispatcher")
		assert.Equal(t, &LibxdpDispatcher{Program: id, Version: 2,
			Components: []LibxdpComponent{{Slot: 0, RunPrio: 50, ChainCallActions: 1<<2 | 1<<31}}}, d)
		refused(t, "libxdp's dispatcher", fmt.Sprintf("libxdp's dispatcher (program %d, protocol version 2)", id),
			"xdp-loader unload -a "+iface)
		assert.Equal(t, id, attachedID(t), "the dispatcher after the refused Attach")
	})

	t.Run("shield first", func(t *testing.T) {
		require.Zero(t, attachedID(t), "attached before the shield")
		var a *Attachment
		require.NoError(t, edge.Do(func() (err error) {
			a, err = Attach(AttachOptions{Iface: iface, PinRoot: root, Load: shield.Options{TableSize: 4096}})
			return err
		}))
		defer func() { a.Detach(); a.Close() }()
		require.Equal(t, a.Program, attachedID(t))
		out, err := inEdge("xdp-filter", "load", "-m", "native", iface)
		if err == nil {
			inEdge("xdp-filter", "unload", iface)
		}
		require.Error(t, err, "xdp-filter load beside the shield: %s", out)
		assert.Equal(t, a.Program, attachedID(t), "the shield after xdp-filter was refused")
		assert.Nil(t, find(t), "the shield's program taken for a dispatcher")
	})
}
