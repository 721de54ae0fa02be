package kernels

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// DefaultMirror is the Debian archive the pins come from.
const DefaultMirror = "http://deb.debian.org/debian"

// DefaultKeyring verifies the archive's Release files.
const DefaultKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// Apt runs apt-get and apt-cache with a private configuration under Dir:
// its own sources list, state and cache. APT_CONFIG points at a file that
// redirects every Dir:: setting, so neither /etc/apt nor /var/lib/apt is
// read for sources or written.
type Apt struct {
	Dir     string   // root of the private configuration
	Mirror  string   // DefaultMirror when empty
	Keyring string   // DefaultKeyring when empty
	Suites  []string // suites in the sources list
	Log     *slog.Logger
}

// ErrNotServed marks a pinned package version the archive no longer serves.
var ErrNotServed = errors.New("not served by the archive")

func (a *Apt) conf() string { return filepath.Join(a.Dir, "apt.conf") }

func (a *Apt) logger() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}

// setup writes the private configuration.
func (a *Apt) setup() error {
	mirror, keyring := a.Mirror, a.Keyring
	if mirror == "" {
		mirror = DefaultMirror
	}
	if keyring == "" {
		keyring = DefaultKeyring
	}
	for _, d := range []string{"etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d", "etc/trusted.gpg.d",
		"state/lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(a.Dir, d), 0o755); err != nil {
			return fmt.Errorf("apt setup: %w", err)
		}
	}
	status := filepath.Join(a.Dir, "state/status")
	if _, err := os.Stat(status); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(status, nil, 0o644); err != nil {
			return fmt.Errorf("apt setup: %w", err)
		}
	}
	var src strings.Builder
	for _, s := range a.Suites {
		fmt.Fprintf(&src, "deb [arch=amd64 signed-by=%s] %s %s main\n", keyring, mirror, s)
	}
	if err := writeIfChanged(filepath.Join(a.Dir, "etc/sources.list"), src.String()); err != nil {
		return err
	}
	d := a.Dir
	conf := fmt.Sprintf(`// Private apt configuration of xdpshield's vmtest; written by the harness.
Dir::Etc "%[1]s/etc";
Dir::Etc::SourceList "%[1]s/etc/sources.list";
Dir::Etc::SourceParts "%[1]s/etc/sources.list.d";
Dir::Etc::Parts "%[1]s/etc/apt.conf.d";
Dir::Etc::Preferences "%[1]s/etc/preferences";
Dir::Etc::PreferencesParts "%[1]s/etc/preferences.d";
Dir::Etc::TrustedParts "%[1]s/etc/trusted.gpg.d";
Dir::State "%[1]s/state";
Dir::State::status "%[1]s/state/status";
Dir::Cache "%[1]s/cache";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
APT::Sandbox::User "root";
Acquire::Languages "none";
// Debian's frozen or mirrored suites may carry Release files past Valid-Until;
// the signatures are still checked.
Acquire::Check-Valid-Until "false";
`, d)
	return writeIfChanged(a.conf(), conf)
}

func writeIfChanged(path, content string) error {
	if b, err := os.ReadFile(path); err == nil && string(b) == content {
		return nil
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("apt setup: %w", err)
	}
	return nil
}

func (a *Apt) run(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "APT_CONFIG="+a.conf(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	if w := strings.TrimSpace(errb.String()); w != "" {
		a.logger().Debug("apt stderr", LogCmd, name, LogStderr, w)
	}
	return out.Bytes(), nil
}

// Update refreshes the package lists unless they are younger than maxAge
// (0 forces the update). When a suite's Release file is signed by a key the
// machine's keyring lacks (a keyring older than sid or testing), it fetches
// the newest debian-archive-keyring package through the suites the
// machine's keyring does verify, into the private directory (nothing is
// installed), and retries with it.
func (a *Apt) Update(ctx context.Context, maxAge time.Duration) error {
	if a.Keyring == "" {
		a.Keyring = DefaultKeyring
		if _, err := os.Stat(a.cachedKeyring()); err == nil {
			a.Keyring = a.cachedKeyring()
		}
	}
	if err := a.setup(); err != nil {
		return err
	}
	stamp := filepath.Join(a.Dir, "state/updated")
	if maxAge > 0 {
		if st, err := os.Stat(stamp); err == nil && time.Since(st.ModTime()) < maxAge {
			return nil
		}
	}
	err := a.update(ctx)
	if errors.Is(err, errSignature) && a.Keyring == DefaultKeyring {
		a.logger().Warn("the machine's archive keyring does not verify every suite; fetching a newer debian-archive-keyring into the cache", LogErr, err)
		if kerr := a.fetchKeyring(ctx); kerr != nil {
			return fmt.Errorf("%w; and fetching a newer keyring failed: %v", err, kerr)
		}
		a.Keyring = a.cachedKeyring()
		if err := a.setup(); err != nil {
			return err
		}
		err = a.update(ctx)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(stamp, nil, 0o644)
}

var errSignature = errors.New("signature check failed")

func (a *Apt) update(ctx context.Context) error {
	a.logger().Info("apt update (private configuration)", LogDir, a.Dir, LogSuites, strings.Join(a.Suites, " "), LogKeyring, a.Keyring)
	out, err := a.run(ctx, a.Dir, "apt-get", "-q", "update")
	msg := string(out)
	if err != nil {
		msg += err.Error()
	}
	// apt-get update may exit 0 when a suite's signature fails; say so.
	if strings.Contains(msg, "NO_PUBKEY") || strings.Contains(msg, "is not signed") || strings.Contains(msg, "EXPKEYSIG") {
		return fmt.Errorf("update the private package lists (keyring %s): %w: %s", a.Keyring, errSignature, strings.TrimSpace(msg))
	}
	if err != nil {
		return fmt.Errorf("update the private package lists: %w", err)
	}
	return nil
}

func (a *Apt) cachedKeyring() string {
	return filepath.Join(a.Dir, "keyrings", "debian-archive-keyring.gpg")
}

// fetchKeyring downloads debian-archive-keyring from the stable suites
// (verified by the machine's keyring) and extracts its keyring file.
func (a *Apt) fetchKeyring(ctx context.Context) error {
	k := &Apt{Dir: filepath.Join(a.Dir, "keyring-apt"), Mirror: a.Mirror, Keyring: DefaultKeyring,
		Suites: []string{"bookworm", "bookworm-updates", "trixie", "trixie-updates"}, Log: a.Log}
	if err := k.setup(); err != nil {
		return err
	}
	if err := k.update(ctx); err != nil && !errors.Is(err, errSignature) {
		return err
	}
	dir := filepath.Join(a.Dir, "keyrings")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := k.run(ctx, dir, "apt-get", "-q", "download", "debian-archive-keyring"); err != nil {
		return err
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "debian-archive-keyring_*.deb"))
	if len(debs) == 0 {
		return errors.New("apt-get download debian-archive-keyring left no package")
	}
	found := false
	err := walkDeb(debs[len(debs)-1], func(name string, _ *tar.Header, r io.Reader) error {
		// .pgp since 2025.1, .gpg (now a symlink) before.
		if name == "usr/share/keyrings/debian-archive-keyring.pgp" || name == "usr/share/keyrings/debian-archive-keyring.gpg" {
			found = true
			return writeFile(a.cachedKeyring(), r)
		}
		return nil
	})
	if err == nil && !found {
		err = errors.New("debian-archive-keyring has no usr/share/keyrings/debian-archive-keyring.{pgp,gpg}")
	}
	return err
}

// Download fetches package=version from suite into dir.
func (a *Apt) Download(ctx context.Context, dir string, d Deb, suite string) error {
	if err := a.setup(); err != nil {
		return err
	}
	_, err := a.run(ctx, dir, "apt-get", "-q", "download", d.Package+"="+d.Version)
	if err != nil {
		if notServed.MatchString(err.Error()) {
			return fmt.Errorf("%s (%s): %w", d, suite, ErrNotServed)
		}
		return fmt.Errorf("download %s: %w", d, err)
	}
	return nil
}

var notServed = regexp.MustCompile(`(?i)(can't find a source to download|version '.*' for '.*' was not found|unable to locate package|has no installation candidate)`)

// Show returns the control fields of package in suite (the suite's
// candidate), as apt-cache show prints them.
func (a *Apt) Show(ctx context.Context, pkg, suite string) (map[string]string, error) {
	out, err := a.run(ctx, a.Dir, "apt-cache", "show", pkg+"/"+suite)
	if err != nil {
		return nil, fmt.Errorf("look up %s in %s: %w", pkg, suite, err)
	}
	// Several stanzas when several suites carry versions: take the one
	// whose version is the suite's (apt-cache show pkg/suite prints it
	// first).
	stanza, _, _ := bytes.Cut(out, []byte("\n\n"))
	return parseControl(string(stanza)), nil
}

func parseControl(s string) map[string]string {
	m := map[string]string{}
	var key string
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if key != "" {
				m[key] += "\n" + strings.TrimSpace(line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key = k
		m[k] = strings.TrimSpace(v)
	}
	return m
}

// depends lists the package names of a Depends field (alternatives
// flattened, versions dropped).
func depends(field string) []string {
	var names []string
	for _, alt := range strings.Split(field, ",") {
		for _, p := range strings.Split(alt, "|") {
			p = strings.TrimSpace(p)
			if i := strings.IndexAny(p, " ("); i >= 0 {
				p = p[:i]
			}
			if p != "" {
				names = append(names, p)
			}
		}
	}
	return names
}
