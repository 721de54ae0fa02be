package vmtest

import (
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks as its
// initramfs. Parent directories are created as needed.
type cpioWriter struct {
	w    io.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

func newCPIO(w io.Writer) *cpioWriter {
	return &cpioWriter{w: w, ino: 1, dirs: map[string]bool{"": true, ".": true, "/": true}}
}

const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioLink = 0o120000
	cpioChr  = 0o020000
)

func (c *cpioWriter) header(name string, mode uint32, size int, rmaj, rmin uint32) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rmaj, rmin, len(name)+1, 0)
	_, c.err = io.WriteString(c.w, hdr+name+"\x00"+pad4(110+len(name)+1))
}

func pad4(n int) string { return strings.Repeat("\x00", (4-n%4)%4) }

func (c *cpioWriter) mkdirAll(dir string) {
	dir = strings.TrimPrefix(path.Clean(dir), "/")
	if c.dirs[dir] {
		return
	}
	c.mkdirAll(path.Dir(dir))
	c.dirs[dir] = true
	c.header(dir, cpioDir|0o755, 0, 0, 0)
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string) { c.mkdirAll(name) }

// File adds a regular file with data.
func (c *cpioWriter) File(name string, mode uint32, data []byte) {
	name = strings.TrimPrefix(path.Clean(name), "/")
	c.mkdirAll(path.Dir(name))
	c.header(name, cpioReg|mode, len(data), 0, 0)
	if c.err == nil {
		_, c.err = c.w.Write(data)
	}
	if c.err == nil {
		_, c.err = io.WriteString(c.w, pad4(len(data)))
	}
}

// HostFile adds a copy of a host file.
func (c *cpioWriter) HostFile(name, src string, mode uint32) {
	b, err := os.ReadFile(src)
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return
	}
	c.File(name, mode, b)
}

// Symlink adds a symbolic link.
func (c *cpioWriter) Symlink(name, target string) {
	name = strings.TrimPrefix(path.Clean(name), "/")
	c.mkdirAll(path.Dir(name))
	c.header(name, cpioLink|0o777, len(target), 0, 0)
	if c.err == nil {
		_, c.err = io.WriteString(c.w, target+pad4(len(target)))
	}
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, major, minor uint32) {
	name = strings.TrimPrefix(path.Clean(name), "/")
	c.mkdirAll(path.Dir(name))
	c.header(name, cpioChr|0o600, 0, major, minor)
}

// HostTree adds the regular files under src (recursively) at dst.
func (c *cpioWriter) HostTree(dst, src string, skip func(rel string) bool) {
	var walk func(rel string)
	walk = func(rel string) {
		ents, err := os.ReadDir(path.Join(src, rel))
		if err != nil {
			if c.err == nil {
				c.err = err
			}
			return
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		for _, e := range ents {
			r := path.Join(rel, e.Name())
			if skip != nil && skip(r) {
				continue
			}
			switch {
			case e.IsDir():
				c.mkdirAll(path.Join(dst, r))
				walk(r)
			case e.Type().IsRegular():
				info, err := e.Info()
				if err != nil {
					continue
				}
				c.HostFile(path.Join(dst, r), path.Join(src, r), uint32(info.Mode().Perm()))
			}
		}
	}
	c.mkdirAll(dst)
	walk("")
}

// Close writes the trailer.
func (c *cpioWriter) Close() error {
	c.header("TRAILER!!!", 0, 0, 0, 0)
	return c.err
}
