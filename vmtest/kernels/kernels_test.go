package kernels

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/net/netfilter/nf_tables.ko.xz": "nf_tables",
		"nf-tables":                            "nf_tables",
		"veth.ko":                              "veth",
		"sch_ingress.ko.zst":                   "sch_ingress",
	} {
		assert.Equal(t, want, moduleName(in), "moduleName(%q)", in)
	}
}

func TestExtractVmlinuxRejects(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "vmlinuz")
	require.NoError(t, os.WriteFile(src, bytes.Repeat([]byte{0}, 4096), 0o644))
	err := extractVmlinux(src, filepath.Join(dir, "vmlinux"))
	require.ErrorContains(t, err, "not a bzImage", "extractVmlinux(zeros)")
	assert.False(t, hasPVHNote([]byte("not an elf")), "hasPVHNote(garbage)")
}
