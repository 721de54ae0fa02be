package config

import (
	"fmt"

	"github.com/xdpshield/xdpshield/bpf"
)

// Clock selects where the program reads time. Its values are the program's
// clock_mode values (enum clock in bpf/shield.c, as bpf2go emits it).
type Clock uint8

const (
	// ClockJiffies reads bpf_jiffies64 (cheapest; resolution 1/CONFIG_HZ,
	// which the loader measures). The default: CLOCK_JIFFIES is 0.
	ClockJiffies = Clock(bpf.ShieldClockCLOCK_JIFFIES)
	// ClockKtime reads bpf_ktime_get_ns (exact, dearer).
	ClockKtime = Clock(bpf.ShieldClockCLOCK_KTIME)
	// ClockVirtual reads a variable set with SetTime: the simulator's clock.
	ClockVirtual = Clock(bpf.ShieldClockCLOCK_VIRTUAL)
)

// Options' zero value loads the jiffies clock: a C enum that gives another
// clock 0 fails the build here (a negative array length).
var _ [1 - 2*int(ClockJiffies)]struct{}

// clockNames are the clocks' names, keyed by value (TestContract checks
// them against the object's BTF).
var clockNames = [...]string{ClockJiffies: "jiffies", ClockKtime: "ktime", ClockVirtual: "virtual"}

// Valid says whether c is a clock the program knows.
func (c Clock) Valid() bool { return int(c) < len(clockNames) && clockNames[c] != "" }

func (c Clock) String() string {
	if c.Valid() {
		return clockNames[c]
	}
	return fmt.Sprintf("clock(%d)", uint8(c))
}
