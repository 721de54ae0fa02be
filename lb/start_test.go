package lb

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/internal/testutil"
	"github.com/xdpshield/xdpshield/lb/cgroup2"
	"github.com/xdpshield/xdpshield/lb/lbconf"
)

// TestStart brings a balancer up from a configuration: services added,
// programs attached to the cgroup (created); and refuses a bad one whole.
func TestStart(t *testing.T) {
	testutil.Root(t)
	mnt := t.TempDir()
	require.NoError(t, cgroup2.Mount(mnt))
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	dir := filepath.Join(mnt, fmt.Sprintf("xdps-lbstart-%d", os.Getpid()))
	t.Cleanup(func() { os.Remove(dir) })

	cfg := lbconf.DefaultConfig()
	if s, err := Start(cfg); s != nil || err != nil {
		assert.Fail(t, fmt.Sprintf("Start(no services) = %v, %v; want nil, nil", s, err))
	}
	cfg.Cgroup = dir
	cfg.Service = []lbconf.ServiceConfig{{VIP: "198.18.1.1", Port: 80, Mode: "maglev", Backends: []string{"198.18.2.1:80", "198.18.2.2:80"}}}
	s, err := Start(cfg)
	require.NoError(t, err)
	if got := s.Services(); len(got) != 1 || len(got[0].Backends) != 2 || s.Cgroup != dir {
		assert.Fail(t, fmt.Sprintf("Start: services %+v in %s, want the configured one in %s", got, s.Cgroup, dir))
	}
	// The kernel's word, not the links this process holds: each program is
	// attached to the configured cgroup at its own hook.
	for _, ap := range s.attachTypes() {
		assert.NoError(t, attachedTo(dir, ap))
	}
	assert.NoError(t, s.Close(), "Close")

	cfg.Service = append(cfg.Service, lbconf.ServiceConfig{VIP: "198.18.2.1", Port: 53, Protocol: "udp", Backends: []string{"198.18.3.1:53"}})
	if s, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "VIP 198.18.2.1 is a backend address") {
		assert.Fail(t, fmt.Sprintf("Start(VIP that is a backend) = %v, %v; want an error naming it", s, err))
		s.Close()
	}
}

// attachedTo says whether the kernel has ap's program attached to the
// cgroup dir at ap's hook.
func attachedTo(dir string, ap attachPoint) error {
	cg, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer cg.Close()
	info, err := ap.prog.Info()
	if err != nil {
		return err
	}
	id, ok := info.ID()
	if !ok {
		return fmt.Errorf("%s: no program ID", ap.pin)
	}
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: ap.typ})
	if err != nil {
		return fmt.Errorf("query %s on %s: %w", ap.typ, dir, err)
	}
	var ids []ebpf.ProgramID
	for _, p := range res.Programs {
		if p.ID == id {
			return nil
		}
		ids = append(ids, p.ID)
	}
	return fmt.Errorf("%s: program %d not attached to %s at %s (attached: %v)", ap.pin, id, dir, ap.typ, ids)
}
