package testutil

import (
	"bytes"
	"os"
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
