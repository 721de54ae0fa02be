package kernels

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// DefaultLockPath is the lock file, relative to the module root.
const DefaultLockPath = "fixtures/kernels.lock"

// RepinCommand is what a stale pin's error tells the reader to run.
const RepinCommand = "make kernels-repin"

// Lock is the parsed kernels.lock: the kernels the matrix boots.
type Lock struct {
	Kernels []Pin
}

// Pin is one kernel: a name used on the command line (KERNELS="5.10 6.1"),
// the Debian suite it comes from, the release `uname -r` must print, the
// packages that carry it and the kernel image inside them.
type Pin struct {
	Name    string // "5.10"
	Suite   string // "bullseye"
	Release string // "5.10.0-32-cloud-amd64"
	Debs    []Deb
	Vmlinuz File // path inside one of Debs, and its sha256
}

// Deb is one pinned Debian package.
type Deb struct {
	Package string
	Version string
	SHA256  string
}

// File is a file inside a package, with its sha256.
type File struct {
	Path   string
	SHA256 string
}

// Filename is the name apt-get download gives the package's file.
func (d Deb) Filename() string {
	return d.Package + "_" + strings.ReplaceAll(d.Version, ":", "%3a") + "_amd64.deb"
}

// String names the pin as apt does: package=version.
func (d Deb) String() string { return d.Package + "=" + d.Version }

// Find returns the pin called name.
func (l *Lock) Find(name string) (*Pin, error) {
	for i := range l.Kernels {
		if l.Kernels[i].Name == name {
			return &l.Kernels[i], nil
		}
	}
	names := make([]string, len(l.Kernels))
	for i, k := range l.Kernels {
		names[i] = k.Name
	}
	return nil, fmt.Errorf("kernel %q is not pinned in %s (pinned: %s); add it and run `%s`",
		name, DefaultLockPath, strings.Join(names, " "), RepinCommand)
}

// ReadLock reads and parses a lock file.
func ReadLock(path string) (*Lock, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kernel lock: %w", err)
	}
	l, err := ParseLock(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// ParseLock parses the lock format:
//
//	kernel <name> <suite> <release>
//		deb <package> <version> <sha256>
//		vmlinuz <path-in-package> <sha256>
//
// Blank lines and lines starting with # are ignored.
func ParseLock(r io.Reader) (*Lock, error) {
	var l Lock
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		bad := func(format string, a ...any) error {
			return fmt.Errorf("line %d: %s", n, fmt.Sprintf(format, a...))
		}
		var cur *Pin
		if len(l.Kernels) > 0 {
			cur = &l.Kernels[len(l.Kernels)-1]
		}
		switch f[0] {
		case "kernel":
			if len(f) != 4 {
				return nil, bad("want `kernel <name> <suite> <release>`, got %q", line)
			}
			for _, k := range l.Kernels {
				if k.Name == f[1] {
					return nil, bad("kernel %q pinned twice", f[1])
				}
			}
			l.Kernels = append(l.Kernels, Pin{Name: f[1], Suite: f[2], Release: f[3]})
		case "deb":
			if cur == nil {
				return nil, bad("deb before any kernel line")
			}
			if len(f) != 4 {
				return nil, bad("want `deb <package> <version> <sha256>`, got %q", line)
			}
			if !isSHA256(f[3]) {
				return nil, bad("deb %s: %q is not a sha256", f[1], f[3])
			}
			cur.Debs = append(cur.Debs, Deb{Package: f[1], Version: f[2], SHA256: f[3]})
		case "vmlinuz":
			if cur == nil {
				return nil, bad("vmlinuz before any kernel line")
			}
			if len(f) != 3 {
				return nil, bad("want `vmlinuz <path> <sha256>`, got %q", line)
			}
			if !isSHA256(f[2]) {
				return nil, bad("vmlinuz: %q is not a sha256", f[2])
			}
			if cur.Vmlinuz.Path != "" {
				return nil, bad("kernel %s: two vmlinuz lines", cur.Name)
			}
			cur.Vmlinuz = File{Path: f[1], SHA256: f[2]}
		default:
			return nil, bad("unknown record %q", f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, k := range l.Kernels {
		if len(k.Debs) == 0 {
			return nil, fmt.Errorf("kernel %s: no deb lines", k.Name)
		}
		if k.Vmlinuz.Path == "" {
			return nil, fmt.Errorf("kernel %s: no vmlinuz line", k.Name)
		}
	}
	if len(l.Kernels) == 0 {
		return nil, errors.New("no kernels pinned")
	}
	return &l, nil
}

const lockHeader = `# Debian kernels the VM matrix boots (vmtest/). Written by ` + "`" + RepinCommand + "`" + `,
# verified on every use: sha256 of each .deb and of the vmlinuz inside it.
#
# kernel <name> <suite> <release, as uname -r prints it>
#	deb <package> <version> <sha256 of the .deb>
#	vmlinuz <path inside the packages> <sha256>
`

// Format writes l in the lock format, kernels in version order.
func (l *Lock) Format(w io.Writer) error {
	ks := append([]Pin(nil), l.Kernels...)
	sort.SliceStable(ks, func(i, j int) bool { return VersionLess(ks[i].Name, ks[j].Name) })
	var b strings.Builder
	b.WriteString(lockHeader)
	for _, k := range ks {
		fmt.Fprintf(&b, "\nkernel %s %s %s\n", k.Name, k.Suite, k.Release)
		for _, d := range k.Debs {
			fmt.Fprintf(&b, "\tdeb %s %s %s\n", d.Package, d.Version, d.SHA256)
		}
		fmt.Fprintf(&b, "\tvmlinuz %s %s\n", k.Vmlinuz.Path, k.Vmlinuz.SHA256)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// VersionLess orders "5.10" < "6.1" < "6.12" < "7.2".
func VersionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		var x, y int
		fmt.Sscan(pa[i], &x)
		fmt.Sscan(pb[i], &y)
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// HashMismatchError reports a file whose sha256 is not the pinned one.
type HashMismatchError struct {
	What      string // "linux-image-...=5.10.223-1" or "vmlinuz of 5.10"
	Path      string
	Got, Want string
}

func (e *HashMismatchError) Error() string {
	return fmt.Sprintf("%s: sha256 of %s is %s, pinned %s (a changed archive file, a corrupt cache or a stale pin: delete the file to fetch it again, or run `%s`)",
		e.What, e.Path, e.Got, e.Want, RepinCommand)
}

// VerifyFile checks that path hashes to want.
func VerifyFile(what, path, want string) error {
	got, err := HashFile(path)
	if err != nil {
		return err
	}
	if got != want {
		return &HashMismatchError{What: what, Path: path, Got: got, Want: want}
	}
	return nil
}

// HashFile returns the hex sha256 of a file.
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
