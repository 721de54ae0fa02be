package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/shield/pin"
)

// Capability numbers (linux/capability.h).
const (
	capNetAdmin = unix.CAP_NET_ADMIN
	capSysAdmin = unix.CAP_SYS_ADMIN
	capPerfmon  = unix.CAP_PERFMON
	capBPF      = unix.CAP_BPF
)

var capNames = map[int]string{capNetAdmin: "CAP_NET_ADMIN", capSysAdmin: "CAP_SYS_ADMIN", capPerfmon: "CAP_PERFMON", capBPF: "CAP_BPF"}

// procStatus reads the process's /proc/self/status (prometheus/procfs):
// its capability sets and user IDs.
func procStatus() (procfs.ProcStatus, error) {
	p, err := procfs.Self()
	if err == nil {
		var st procfs.ProcStatus
		if st, err = p.NewStatus(); err == nil {
			return st, nil
		}
	}
	return procfs.ProcStatus{}, fmt.Errorf("read capabilities: %w", err)
}

// missingCaps names what serve lacks of the capabilities it needs, given
// the effective set eff and whether it will adopt pinned state. CAP_SYS_ADMIN
// alone is enough (the only way on kernels before 5.8 and on engines that do
// not know CAP_BPF, such as Docker 20.10). Without it the modern set loads
// and attaches afresh: CAP_BPF to load the program and its maps,
// CAP_NET_ADMIN to load an XDP program and attach it, CAP_PERFMON for the
// verifier to accept the program's packet access. Adopting pins after a
// restart needs CAP_SYS_ADMIN whatever else is there: the configuration
// map is opened by id (BPF_MAP_GET_FD_BY_ID), which the kernel allows only
// with it. Each was proven needed by taking it away (e2e/container).
func missingCaps(eff uint64, adopting bool) []string {
	has := func(c int) bool { return eff&(1<<c) != 0 }
	if has(capSysAdmin) {
		return nil
	}
	if adopting {
		return []string{capNames[capSysAdmin]}
	}
	var miss []string
	for _, c := range []int{capBPF, capNetAdmin, capPerfmon} {
		if !has(c) {
			miss = append(miss, capNames[c])
		}
	}
	return miss
}

// checkCaps fails, naming each missing capability, when serve could not
// load and attach the program; an error that names the capability is
// better than the one the kernel gives (EPERM, often as "failed to set
// memlock rlimit").
func checkCaps(pinRoot, iface string) error {
	st, err := procStatus()
	if err != nil {
		return err
	}
	eff := st.CapEff
	adopting := false
	if dir, err := pin.PinDir(pinRoot, iface); err == nil {
		_, err := os.Stat(filepath.Join(dir, "link"))
		adopting = err == nil
	}
	return capsError(missingCaps(eff, adopting), adopting, st.UIDs[1], eff, st.CapBnd)
}

// capsError is checkCaps's error for the capabilities miss lacks (nil
// when none), for a process of effective user euid whose effective and
// bounding sets are eff and bnd. A user other than root is told why it lacks them: the set a
// container engine or a unit grants (`--cap-add`, CapabilityBoundingSet=)
// bounds what a process may have, and only root gets it effective; others
// need it as ambient capabilities (`docker run --user 65534 --cap-add
// CAP_SYS_ADMIN` gives none: Docker sets no ambient capabilities).
func capsError(miss []string, adopting bool, euid, eff, bnd uint64) error {
	if len(miss) == 0 {
		return nil
	}
	why := ""
	if euid != 0 {
		var granted []string
		for c, n := range capNames {
			if bnd&^eff&(1<<c) != 0 {
				granted = append(granted, n)
			}
		}
		slices.Sort(granted)
		why = fmt.Sprintf("; serve runs as uid %d, and capabilities granted to a container (--cap-add) or a unit are effective only for uid 0", euid)
		if len(granted) > 0 {
			why += fmt.Sprintf(" (%s is in the bounding set, not in the effective one)", strings.Join(granted, ", "))
		}
		why += ": run serve as root, or grant them as ambient capabilities (systemd AmbientCapabilities=, setpriv --ambient-caps; Docker 20.10 has none);" +
			" its pin root on bpffs must then belong to that user too"
	}
	if adopting {
		return fmt.Errorf("missing capability %s: adopting the pinned shield opens its configuration map by id, which needs it%s", strings.Join(miss, ", "), why)
	}
	return fmt.Errorf("missing capability %s: serve needs CAP_SYS_ADMIN, or CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (kernel 5.8+; a restart that adopts pins needs CAP_SYS_ADMIN)%s", strings.Join(miss, ", "), why)
}
