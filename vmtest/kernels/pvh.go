package kernels

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// The pinned image is a bzImage: real-mode setup, then a compressed kernel
// that decompresses itself, slowly under TCG. Kernels built with
// CONFIG_PVH carry a Xen PVH entry note in their ELF vmlinux, which qemu
// boots directly (no firmware real-mode path, no decompression): about half
// a second less per boot here. The vmlinux is derived from the verified
// vmlinuz and cached beside it; without a PVH note the vmlinuz boots.

// bootImage is the image qemu boots: the PVH vmlinux when there is one.
func (k *Kernel) BootImage() string {
	if k.Vmlinux != "" && os.Getenv("VMTEST_NO_PVH") == "" {
		return k.Vmlinux
	}
	return k.Vmlinuz
}

// extractVmlinux writes the ELF kernel inside bzImage src to dst.
func extractVmlinux(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if len(b) < 0x250 || string(b[0x202:0x206]) != "HdrS" {
		return errors.New("not a bzImage")
	}
	setup := int(b[0x1f1])
	if setup == 0 {
		setup = 4
	}
	off := (setup+1)*512 + int(binary.LittleEndian.Uint32(b[0x248:]))
	n := int(binary.LittleEndian.Uint32(b[0x24c:]))
	if off+n > len(b) || n < 4 {
		return errors.New("bzImage payload out of range")
	}
	payload := b[off : off+n]
	var tool []string
	switch {
	case bytes.HasPrefix(payload, []byte{0x02, 0x21, 0x4c, 0x18}):
		tool = []string{"lz4", "-dc"}
	case bytes.HasPrefix(payload, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		tool = []string{"zstd", "-dc"}
	case bytes.HasPrefix(payload, []byte{0xfd, '7', 'z', 'X', 'Z'}):
		tool = []string{"xz", "-dc"}
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		tool = []string{"gzip", "-dc"}
	default:
		return fmt.Errorf("unknown bzImage compression %x", payload[:4])
	}
	if _, err := exec.LookPath(tool[0]); err != nil {
		return fmt.Errorf("%w (ci/deps.sh installs it)", err)
	}
	cmd := exec.Command(tool[0], tool[1:]...)
	cmd.Stdin = bytes.NewReader(payload)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	// The kernel appends the decompressed size after the stream, which
	// zstd reports as an error; the ELF check below is the judge.
	if len(out) < 4 || string(out[1:4]) != "ELF" {
		return fmt.Errorf("%s: %v: %s", tool[0], err, stderr.String())
	}
	if !hasPVHNote(out) {
		return errors.New("no PVH entry note (CONFIG_PVH off)")
	}
	return os.WriteFile(dst, out, 0o644)
}

// hasPVHNote reports whether an ELF kernel has XEN_ELFNOTE_PHYS32_ENTRY.
func hasPVHNote(img []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return false
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			continue
		}
		for len(data) >= 12 {
			nsz := int(binary.LittleEndian.Uint32(data[0:]))
			dsz := int(binary.LittleEndian.Uint32(data[4:]))
			typ := binary.LittleEndian.Uint32(data[8:])
			name := data[12:min(len(data), 12+nsz)]
			const xenElfnotePhys32Entry = 18
			if typ == xenElfnotePhys32Entry && bytes.HasPrefix(name, []byte("Xen")) {
				return true
			}
			adv := 12 + (nsz+3)&^3 + (dsz+3)&^3
			if adv > len(data) {
				break
			}
			data = data[adv:]
		}
	}
	return false
}
