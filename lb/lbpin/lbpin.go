package lbpin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/pinfs"
	"github.com/xdpshield/xdpshield/lb/cgroup2"
)

// Pin directory names, under the service's pin directory (one per network
// namespace and interface, see pin.PinDir).
const (
	// Subdir holds the balancer's pinned links and maps.
	Subdir = "lb"
	// StagingSubdir is where a first start pins everything before renaming
	// it to Subdir in one step: a Subdir is always complete.
	StagingSubdir = "lb_staging" // bpffs refuses names with a dot
)

// Maps are the maps pinned by name: every map of the programs but the
// loader's constants.
var Maps = []string{bpf.LbMapServices, bpf.LbMapBackends, bpf.LbMapTables, bpf.LbMapReverse, bpf.LbMapCounters, bpf.LbMapSockState, bpf.LbMapStateCounters, bpf.LbMapRanges, bpf.LbMapAffinity, bpf.LbMapBeSockets}

// Link is one program's attach point and the name its link is pinned as.
type Link struct {
	Type ebpf.AttachType
	Pin  string
}

// Links are the balancer's cgroup links, one per program of bpf/lb.c, in
// the order lb attaches them.
var Links = []Link{
	{ebpf.AttachCGroupInet4Connect, "link_connect4"},
	{ebpf.AttachCGroupInet6Connect, "link_connect6"},
	{ebpf.AttachCGroupUDP4Sendmsg, "link_sendmsg4"},
	{ebpf.AttachCGroupUDP6Sendmsg, "link_sendmsg6"},
	{ebpf.AttachCGroupUDP4Recvmsg, "link_recvmsg4"},
	{ebpf.AttachCGroupUDP6Recvmsg, "link_recvmsg6"},
	{ebpf.AttachCgroupInet4GetPeername, "link_getpeername4"},
	{ebpf.AttachCgroupInet6GetPeername, "link_getpeername6"},
	{ebpf.AttachCgroupInetSockRelease, "link_sock_release"},
}

// linkPins are the names of the pinned links, one per program.
func linkPins() []string {
	var out []string
	for _, a := range Links {
		out = append(out, a.Pin)
	}
	return out
}

// ownedPins are the names the balancer pins in its directory: Remove
// removes these and only these.
func ownedPins() map[string]bool {
	owned := map[string]bool{}
	for _, n := range append(linkPins(), Maps...) {
		owned[n] = true
	}
	return owned
}

// Pinned reports whether a balancer is pinned under pinDir (the service's
// pin directory).
func Pinned(pinDir string) bool {
	_, err := os.Stat(filepath.Join(pinDir, Subdir))
	return err == nil
}

// Remove detaches the pinned links in dir (a Subdir or StagingSubdir), removes the balancer's pins and then dir when nothing
// else is left in it. Anything not the balancer's is left where it is and
// named in the error; dir must be on a bpf filesystem. A missing dir is
// not an error. Sockets translated before keep their backends; getpeername
// and recvfrom report the backend from then on.
func Remove(dir string) error {
	ok, err := pinfs.OnBPFFS(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is not on a bpf filesystem: no balancer pins there, nothing removed", dir)
	}
	// Links first: translation stops before the maps go.
	for _, n := range linkPins() {
		p := filepath.Join(dir, n)
		lk, err := link.LoadPinnedLink(p, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("load pinned link %s: %w", p, err)
		}
		err = lk.Detach()
		if err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			lk.Close()
			return fmt.Errorf("detach link %s: %w", p, err)
		}
		err = lk.Unpin()
		lk.Close()
		if err != nil {
			return fmt.Errorf("unpin link %s: %w", p, err)
		}
	}
	return pinfs.RemoveOwned(dir, ownedPins(), "balancer")
}

// Check refuses a pin directory that is not whole (every link and
// map the balancer pins) or whose links are attached to another cgroup
// than cgroup. It changes nothing.
func Check(dir, cgroup string) error {
	var missing []string
	for n := range ownedPins() {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("the balancer pinned in %s is incomplete (no %s): an older layout or an interrupted removal", dir, strings.Join(missing, ", "))
	}
	want, err := cgroup2.ID(cgroup)
	if err != nil {
		return err
	}
	for _, a := range Links {
		p := filepath.Join(dir, a.Pin)
		lk, err := link.LoadPinnedLink(p, nil)
		if err != nil {
			return fmt.Errorf("load pinned link %s: %w", p, err)
		}
		info, err := lk.Info()
		lk.Close()
		if err != nil {
			return fmt.Errorf("pinned link %s: %w", p, err)
		}
		cg := info.Cgroup()
		if cg == nil || ebpf.AttachType(cg.AttachType) != a.Type {
			return fmt.Errorf("the link pinned as %s is not a %s cgroup link", p, a.Type)
		}
		if cg.CgroupId != want {
			return fmt.Errorf("the balancer pinned in %s is attached to cgroup id %d, not to the configured %s (id %d)", dir, cg.CgroupId, cgroup, want)
		}
	}
	return nil
}
