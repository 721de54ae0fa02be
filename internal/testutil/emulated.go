package testutil

import (
	"bytes"
	"os"
	"time"
)

// Emulated reports a CPU emulated by qemu's TCG, where latency bounds meant
// for real hardware do not apply: the VM matrix says so in VMTEST_ACCEL=tcg,
// and a TCG guest started by anything else names itself in /proc/cpuinfo.
func Emulated() bool {
	if os.Getenv("VMTEST_ACCEL") == "tcg" {
		return true
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	return err == nil && (bytes.Contains(b, []byte("QEMU Virtual CPU")) || bytes.Contains(b, []byte("QEMU TCG")))
}

// HangGuard is a deadline that only guards against a hang, never a bound
// on latency: d on real CPUs, three times d under TCG, where a guest
// sharing 2 cores with another guest and the host's runs was seen to
// take over 10 s for an answer a real CPU gives in milliseconds.
func HangGuard(d time.Duration) time.Duration {
	if Emulated() {
		return 3 * d
	}
	return d
}
