package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Capability numbers (linux/capability.h).
const (
	capNetAdmin = 12
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

var capNames = map[int]string{capNetAdmin: "CAP_NET_ADMIN", capSysAdmin: "CAP_SYS_ADMIN", capPerfmon: "CAP_PERFMON", capBPF: "CAP_BPF"}

// effectiveCaps reads the process's effective capability set.
func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("parse CapEff %q: %w", v, err)
			}
			return c, nil
		}
	}
	return 0, fmt.Errorf("no CapEff in /proc/self/status: %w", sc.Err())
}

// missingCaps names what serve lacks of the capabilities it needs, given
// the effective set eff. CAP_SYS_ADMIN alone is enough (the only way on
// kernels before 5.8 and on engines that do not know CAP_BPF, such as
// Docker 20.10); without it the modern set is needed: CAP_BPF to load the
// program and its maps, CAP_NET_ADMIN to attach it, CAP_PERFMON for the
// verifier to accept its pointer arithmetic unchanged.
func missingCaps(eff uint64) []string {
	has := func(c int) bool { return eff&(1<<c) != 0 }
	if has(capSysAdmin) {
		return nil
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
func checkCaps() error {
	eff, err := effectiveCaps()
	if err != nil {
		return err
	}
	if miss := missingCaps(eff); len(miss) > 0 {
		return fmt.Errorf("missing capability %s: serve needs CAP_SYS_ADMIN, or CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (kernel 5.8+)", strings.Join(miss, ", "))
	}
	return nil
}
