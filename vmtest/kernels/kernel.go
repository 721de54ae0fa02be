package kernels

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cache is the on-disk kernel cache: the private apt configuration, the
// downloaded packages and the kernels extracted from them.
type Cache struct {
	Dir string
	Log *slog.Logger
}

// DefaultCacheDir is $XDPSHIELD_CACHE, else $XDG_CACHE_HOME/xdpshield (or
// ~/.cache/xdpshield), else /var/cache/xdpshield.
func DefaultCacheDir() string {
	if d := os.Getenv("XDPSHIELD_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "xdpshield")
	}
	return "/var/cache/xdpshield"
}

func (c *Cache) logger() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// apt returns the private apt configuration. Its sources list always
// holds the suites of DefaultSuites plus those asked for, so one kernel's
// fetch does not drop another suite's lists.
func (c *Cache) apt(suites ...string) *Apt {
	seen := map[string]bool{}
	var all []string
	for _, s := range append(slices.Sorted(maps.Values(DefaultSuites)), suites...) {
		if !seen[s] {
			seen[s] = true
			all = append(all, s)
		}
	}
	return &Apt{Dir: filepath.Join(c.Dir, "apt"), Suites: all, Log: c.Log}
}

// lock serialises fetches, extractions and repins across processes (go
// test -exec runs several vmexec at once).
func (c *Cache) lock() (func(), error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "fetch.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kernel cache lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("kernel cache lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// Kernel is a pinned kernel, verified and extracted.
type Kernel struct {
	Pin     *Pin
	Vmlinuz string // path of the verified kernel image
	Vmlinux string // the ELF kernel derived from it, when it boots through PVH; "" otherwise
	Modules string // directory holding the package's kernel/ module tree
}

// Fetch makes sure every package of pin is in the cache with its pinned
// hash (downloading what is missing through the private apt
// configuration), extracts the kernel image and modules, and verifies the
// image's hash. A version the archive no longer serves fails naming the pin
// and RepinCommand.
func (c *Cache) Fetch(ctx context.Context, pin *Pin) (*Kernel, error) {
	unlock, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	debDir := filepath.Join(c.Dir, "debs")
	if err := os.MkdirAll(debDir, 0o755); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	updated := false
	for _, d := range pin.Debs {
		path := filepath.Join(debDir, d.Filename())
		if _, err := os.Stat(path); err == nil {
			if err := VerifyFile(d.String(), path, d.SHA256); err != nil {
				return nil, fmt.Errorf("kernel %s: %w", pin.Name, err)
			}
			continue
		}
		a := c.apt(pin.Suite)
		if !updated {
			if err := a.Update(ctx, 24*time.Hour); err != nil {
				return nil, fmt.Errorf("kernel %s: %w", pin.Name, err)
			}
			updated = true
		}
		c.logger().Info("download kernel package", LogKernel, pin.Name, LogDeb, d.String(), LogSuite, pin.Suite)
		err := a.Download(ctx, debDir, d, pin.Suite)
		if errors.Is(err, ErrNotServed) {
			// The lists may be a day old: refresh once before giving up.
			if uerr := a.Update(ctx, 0); uerr == nil {
				err = a.Download(ctx, debDir, d, pin.Suite)
			}
		}
		if errors.Is(err, ErrNotServed) {
			return nil, fmt.Errorf("kernel %s: pinned package %s from %s is no longer served by %s; run `%s` to rewrite %s",
				pin.Name, d, pin.Suite, DefaultMirror, RepinCommand, DefaultLockPath)
		}
		if err != nil {
			return nil, fmt.Errorf("kernel %s: %w", pin.Name, err)
		}
		if err := VerifyFile(d.String(), path, d.SHA256); err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("kernel %s: %w", pin.Name, err)
		}
	}
	return c.extract(pin)
}

// extract unpacks the image and modules once per pin into
// kernels/<release>-<vmlinuz sha prefix>, then verifies the image.
func (c *Cache) extract(pin *Pin) (*Kernel, error) {
	dir := filepath.Join(c.Dir, "kernels", pin.Release+"-"+pin.Vmlinuz.SHA256[:12])
	k := &Kernel{Pin: pin, Vmlinuz: filepath.Join(dir, "vmlinuz"), Modules: filepath.Join(dir, "modules")}
	done := filepath.Join(dir, ".done")
	if _, err := os.Stat(done); err != nil {
		tmp := dir + ".tmp"
		os.RemoveAll(tmp)
		if err := os.MkdirAll(filepath.Join(tmp, "modules"), 0o755); err != nil {
			return nil, fmt.Errorf("kernel cache: %w", err)
		}
		modPrefix := regexp.MustCompile(`^(usr/)?lib/modules/` + regexp.QuoteMeta(pin.Release) + `/`)
		found := false
		for _, d := range pin.Debs {
			err := walkDeb(filepath.Join(c.Dir, "debs", d.Filename()), func(name string, hdr *tar.Header, r io.Reader) error {
				var dst string
				switch {
				case name == pin.Vmlinuz.Path:
					dst, found = filepath.Join(tmp, "vmlinuz"), true
				case modPrefix.MatchString(name):
					rel := modPrefix.ReplaceAllString(name, "")
					if !strings.HasPrefix(rel, "kernel/") && !strings.HasPrefix(rel, "modules.") {
						return nil
					}
					dst = filepath.Join(tmp, "modules", rel)
				default:
					return nil
				}
				return writeFile(dst, r)
			})
			if err != nil {
				return nil, fmt.Errorf("kernel %s: extract %s: %w", pin.Name, d, err)
			}
		}
		if !found {
			return nil, fmt.Errorf("kernel %s: %s is in none of its packages; run `%s`", pin.Name, pin.Vmlinuz.Path, RepinCommand)
		}
		os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			return nil, fmt.Errorf("kernel cache: %w", err)
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return nil, fmt.Errorf("kernel cache: %w", err)
		}
	}
	if err := VerifyFile("vmlinuz of kernel "+pin.Name, k.Vmlinuz, pin.Vmlinuz.SHA256); err != nil {
		os.Remove(done)
		return nil, err
	}
	// The vmlinux is derived from the vmlinuz just verified; a marker
	// records a kernel without PVH so the extraction is not retried.
	vmlinux, noPVH := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "vmlinux.none")
	if _, err := os.Stat(vmlinux); err == nil {
		k.Vmlinux = vmlinux
	} else if _, err := os.Stat(noPVH); err != nil {
		if err := extractVmlinux(k.Vmlinuz, vmlinux+".tmp"); err != nil {
			c.logger().Info("booting the bzImage: no PVH vmlinux", LogKernel, pin.Name, LogWhy, err)
			if !errors.Is(err, exec.ErrNotFound) {
				os.WriteFile(noPVH, []byte(err.Error()+"\n"), 0o644)
			}
		} else if err := os.Rename(vmlinux+".tmp", vmlinux); err == nil {
			k.Vmlinux = vmlinux
		}
	}
	return k, nil
}

func writeFile(dst string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// DefaultSuites maps the kernel names of the matrix to the Debian suites
// whose cloud kernel they are, for a repin without a lock file.
var DefaultSuites = map[string]string{"5.10": "bullseye", "6.1": "bookworm", "6.12": "trixie", "7.2": "sid"}

// Repin resolves, for each (name, suite), the suite's current cloud-amd64
// kernel (the linux-image-cloud-amd64 meta-package's dependency, and the
// linux-binary-*/linux-modules-* packages it is split into where it is),
// downloads the packages, hashes them and the image inside, and returns the
// new lock. A name whose suite moved to another major.minor is renamed, and
// the rename logged.
func (c *Cache) Repin(ctx context.Context, names []string, suites map[string]string) (*Lock, error) {
	var all []string
	for _, n := range names {
		s, ok := suites[n]
		if !ok {
			return nil, fmt.Errorf("repin: no suite known for kernel %q", n)
		}
		all = append(all, s)
	}
	unlock, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	a := c.apt(all...)
	if err := a.Update(ctx, 0); err != nil {
		return nil, err
	}
	debDir := filepath.Join(c.Dir, "debs")
	if err := os.MkdirAll(debDir, 0o755); err != nil {
		return nil, err
	}
	var l Lock
	for _, n := range names {
		suite := suites[n]
		meta, err := a.Show(ctx, "linux-image-cloud-amd64", suite)
		if err != nil {
			return nil, err
		}
		var image string
		for _, p := range depends(meta["Depends"]) {
			if strings.HasPrefix(p, "linux-image-") {
				image = p
			}
		}
		if image == "" {
			return nil, fmt.Errorf("repin %s: linux-image-cloud-amd64 in %s depends on no linux-image-*: %q", n, suite, meta["Depends"])
		}
		release := strings.TrimPrefix(image, "linux-image-")
		img, err := a.Show(ctx, image, suite)
		if err != nil {
			return nil, err
		}
		pkgs := []string{}
		for _, p := range depends(img["Depends"]) {
			if strings.HasPrefix(p, "linux-binary-"+release) || strings.HasPrefix(p, "linux-modules-"+release) {
				pkgs = append(pkgs, p)
			}
		}
		if len(pkgs) == 0 {
			pkgs = []string{image} // one package carries image and modules
		}
		pin := Pin{Name: majorMinor(img["Version"]), Suite: suite, Release: release}
		if pin.Name != n {
			c.logger().Warn("suite moved to another kernel: pin renamed; update KERNELS", LogSuite, suite, LogWas, n, LogNow, pin.Name)
		}
		for _, p := range pkgs {
			f, err := a.Show(ctx, p, suite)
			if err != nil {
				return nil, err
			}
			d := Deb{Package: p, Version: f["Version"], SHA256: f["SHA256"]}
			path := filepath.Join(debDir, d.Filename())
			if err := VerifyFile(d.String(), path, d.SHA256); err != nil {
				if err := a.Download(ctx, debDir, d, suite); err != nil {
					return nil, fmt.Errorf("repin %s: %w", n, err)
				}
				// The Packages file's hash is signed through Release: the
				// download must match it.
				if err := VerifyFile(d.String(), path, d.SHA256); err != nil {
					return nil, fmt.Errorf("repin %s: %w", n, err)
				}
			}
			err = walkDeb(path, func(name string, _ *tar.Header, r io.Reader) error {
				if name == "boot/vmlinuz-"+release || name == "usr/lib/modules/"+release+"/vmlinuz" || name == "lib/modules/"+release+"/vmlinuz" {
					tmp := filepath.Join(debDir, ".vmlinuz.tmp")
					if err := writeFile(tmp, r); err != nil {
						return err
					}
					defer os.Remove(tmp)
					h, err := HashFile(tmp)
					if err != nil {
						return err
					}
					pin.Vmlinuz = File{Path: name, SHA256: h}
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("repin %s: %w", n, err)
			}
			pin.Debs = append(pin.Debs, d)
		}
		if pin.Vmlinuz.Path == "" {
			return nil, fmt.Errorf("repin %s: no kernel image in %s", n, strings.Join(pkgs, ", "))
		}
		c.logger().Info("pinned", LogKernel, pin.Name, LogSuite, suite, LogRelease, release)
		l.Kernels = append(l.Kernels, pin)
	}
	return &l, nil
}

// majorMinor turns a Debian version "6.12.117-1" (or "7.3~rc1-1") into
// "6.12" ("7.3").
func majorMinor(v string) string {
	m := majorMinorRE.FindString(v)
	if m == "" {
		return v
	}
	return m
}

var majorMinorRE = regexp.MustCompile(`^\d+\.\d+`)
