package kernels

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultModules are the modules the suites need, by name; whatever a
// kernel has built in is skipped, dependencies are added.
var DefaultModules = []string{
	"veth",        // topo, storms
	"sch_ingress", // the probe's clsact qdisc (before TCX, 6.6)
	"cls_bpf",     // the probe's filters on it
	"inet_diag",   // the API's per-user connection bound on loopback (sock_diag)
	"tcp_diag",    // its TCP half
	"ipip",        // xdplb: the backends decapsulate IPIP
	"ip6_tunnel",  // and IP6IP6
}

// moduleName normalises a module file or name: "nf_tables.ko.xz" and
// "nf-tables" are both "nf_tables".
func moduleName(s string) string {
	s = filepath.Base(s)
	for _, suf := range []string{".xz", ".zst", ".gz"} {
		s = strings.TrimSuffix(s, suf)
	}
	s = strings.TrimSuffix(s, ".ko")
	return strings.ReplaceAll(s, "-", "_")
}

// moduleIndex maps module names to files under a kernel's module tree.
func moduleIndex(dir string) (map[string]string, error) {
	idx := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			idx[moduleName(d.Name())] = p
		}
		return nil
	})
	return idx, err
}

// readModule returns the module's ELF image, decompressed.
func readModule(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, wait, err := decompress(f, path)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return b, wait()
}

// modinfoDepends reads the depends= entry of a module's .modinfo section,
// the same list depmod writes into modules.dep.
func modinfoDepends(ko []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return nil, err
	}
	s := f.Section(".modinfo")
	if s == nil {
		return nil, nil
	}
	data, err := s.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, moduleName(d))
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}

// Module is a module to load, decompressed, in load order.
type Module struct {
	Name string
	ELF  []byte
}

// ResolveModules returns want and their dependencies in load order
// (dependencies first). Names the kernel does not ship as modules (built
// in, or absent) are returned in missing.
func ResolveModules(dir string, want []string) (mods []Module, missing []string, err error) {
	idx, err := moduleIndex(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("modules: %w", err)
	}
	seen := map[string]bool{}
	var visit func(name string, stack []string) error
	visit = func(name string, stack []string) error {
		name = moduleName(name)
		if seen[name] {
			return nil
		}
		seen[name] = true
		path, ok := idx[name]
		if !ok {
			if len(stack) == 0 {
				missing = append(missing, name)
				return nil
			}
			return fmt.Errorf("module %s (needed by %s) not in the package", name, strings.Join(stack, " <- "))
		}
		ko, err := readModule(path)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		deps, err := modinfoDepends(ko)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		for _, d := range deps {
			if err := visit(d, append(stack, name)); err != nil {
				return err
			}
		}
		mods = append(mods, Module{Name: name, ELF: ko})
		return nil
	}
	for _, w := range want {
		if err := visit(w, nil); err != nil {
			return nil, nil, err
		}
	}
	return mods, missing, nil
}
