package kernels

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	sumA = "fb4a1229952d892138532c1d9f40a7fd0bd408e4dcf969c12e4524b6a89fdcb8"
	sumB = "3d50697d478a4114f7924f7e020027ddce11ef32ed8f1e548952191f179cfe02"
)

func TestParseLock(t *testing.T) {
	good := `# comment
kernel 5.10 bullseye 5.10.0-32-cloud-amd64
	deb linux-image-5.10.0-32-cloud-amd64 5.10.223-1 ` + sumA + `
	vmlinuz boot/vmlinuz-5.10.0-32-cloud-amd64 ` + sumB + `

kernel 7.2 sid 7.2.13+deb14-cloud-amd64
	deb linux-binary-7.2.13+deb14-cloud-amd64 7.2.13-1 ` + sumA + `
	deb linux-modules-7.2.13+deb14-cloud-amd64 7.2.13-1 ` + sumB + `
	vmlinuz usr/lib/modules/7.2.13+deb14-cloud-amd64/vmlinuz ` + sumB + `
`
	tests := []struct {
		name    string
		in      string
		want    *Lock
		wantErr string
	}{
		{name: "good", in: good, want: &Lock{Kernels: []Pin{
			{Name: "5.10", Suite: "bullseye", Release: "5.10.0-32-cloud-amd64",
				Debs:    []Deb{{"linux-image-5.10.0-32-cloud-amd64", "5.10.223-1", sumA}},
				Vmlinuz: File{"boot/vmlinuz-5.10.0-32-cloud-amd64", sumB}},
			{Name: "7.2", Suite: "sid", Release: "7.2.13+deb14-cloud-amd64",
				Debs: []Deb{{"linux-binary-7.2.13+deb14-cloud-amd64", "7.2.13-1", sumA},
					{"linux-modules-7.2.13+deb14-cloud-amd64", "7.2.13-1", sumB}},
				Vmlinuz: File{"usr/lib/modules/7.2.13+deb14-cloud-amd64/vmlinuz", sumB}},
		}}},
		{name: "empty", in: "# nothing\n", wantErr: "no kernels pinned"},
		{name: "deb first", in: "deb a 1 " + sumA + "\n", wantErr: "line 1: deb before any kernel line"},
		{name: "bad hash", in: "kernel 6.1 bookworm r\n\tdeb a 1 abc\n", wantErr: `line 2: deb a: "abc" is not a sha256`},
		{name: "no vmlinuz", in: "kernel 6.1 bookworm r\n\tdeb a 1 " + sumA + "\n", wantErr: "kernel 6.1: no vmlinuz line"},
		{name: "twice", in: good + "kernel 5.10 bullseye x\n", wantErr: `kernel "5.10" pinned twice`},
		{name: "unknown", in: "kernal 6.1 bookworm r\n", wantErr: `unknown record "kernal"`},
		{name: "short kernel", in: "kernel 6.1 bookworm\n", wantErr: "want `kernel <name> <suite> <release>`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLock(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr, "ParseLock()")
				return
			}
			require.NoError(t, err, "ParseLock()")
			require.Equal(t, tt.want, got, "ParseLock()")
			// Format then parse is the identity.
			var buf bytes.Buffer
			require.NoError(t, got.Format(&buf))
			again, err := ParseLock(&buf)
			require.NoError(t, err, "ParseLock(Format())\n%s", buf.String())
			require.Equal(t, got, again, "ParseLock(Format())")
		})
	}
}

// TestRepoLock keeps the committed lock parseable and complete.
func TestRepoLock(t *testing.T) {
	l, _, err := LoadLock(".")
	require.NoError(t, err)
	for _, name := range []string{"5.10", "6.1", "6.12", "7.2"} {
		p, err := l.Find(name)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(p.Release, name+"."), "kernel %s: release %q is another kernel", name, p.Release)
	}
	_, err = l.Find("4.19")
	assert.ErrorContains(t, err, RepinCommand, "Find(4.19)")
}

func TestVerifyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.deb")
	require.NoError(t, os.WriteFile(path, []byte("hello\n"), 0o644))
	const helloSum = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
	require.NoError(t, VerifyFile("x", path, helloSum), "VerifyFile(good)")
	err := VerifyFile("x=1", path, sumA)
	var hm *HashMismatchError
	require.ErrorAs(t, err, &hm, "VerifyFile(bad)")
	require.Equal(t, helloSum, hm.Got, "mismatch: got")
	require.Equal(t, sumA, hm.Want, "mismatch: want")
	require.ErrorContains(t, err, RepinCommand, "the error should name %q", RepinCommand)
	require.ErrorContains(t, err, "x=1", "the error should name the package")
}

// fakeApt puts an apt-get on PATH that fails as apt does for a version the
// archive no longer serves, and an apt-cache that knows nothing.
func fakeApt(t *testing.T) {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\ncase \"$1 $2\" in\n*update*) exit 0;;\nesac\necho \"E: Can't find a source to download version '5.10.1-1' of 'linux-image-x:amd64'\" >&2\nexit 100\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "apt-get"), []byte(script), 0o755))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestFetchErrors(t *testing.T) {
	pin := func() *Pin {
		return &Pin{Name: "5.10", Suite: "bullseye", Release: "5.10.0-1-cloud-amd64",
			Debs:    []Deb{{Package: "linux-image-x", Version: "5.10.1-1", SHA256: sumA}},
			Vmlinuz: File{Path: "boot/vmlinuz-5.10.0-1-cloud-amd64", SHA256: sumB}}
	}
	t.Run("hash mismatch in the cache", func(t *testing.T) {
		c := &Cache{Dir: t.TempDir()}
		p := pin()
		path := filepath.Join(c.Dir, "debs", p.Debs[0].Filename())
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte("tampered"), 0o644))
		_, err := c.Fetch(context.Background(), p)
		var hm *HashMismatchError
		require.ErrorAs(t, err, &hm, "Fetch()")
	})
	t.Run("pin no longer served", func(t *testing.T) {
		fakeApt(t)
		c := &Cache{Dir: t.TempDir()}
		_, err := c.Fetch(context.Background(), pin())
		require.Error(t, err, "Fetch()")
		for _, want := range []string{"linux-image-x=5.10.1-1", "bullseye", "no longer served", RepinCommand} {
			assert.ErrorContains(t, err, want, "Fetch()")
		}
	})
}

func TestDebFilename(t *testing.T) {
	tests := []struct {
		d    Deb
		want string
	}{
		{Deb{Package: "linux-image-6.1.0-50-cloud-amd64", Version: "6.1.176-1"}, "linux-image-6.1.0-50-cloud-amd64_6.1.176-1_amd64.deb"},
		{Deb{Package: "p", Version: "1:2.0-1"}, "p_1%3a2.0-1_amd64.deb"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.d.Filename(), "%v.Filename()", tt.d)
	}
}

func TestMajorMinor(t *testing.T) {
	for in, want := range map[string]string{"6.12.117-1": "6.12", "5.10.223-1": "5.10", "7.2.13-1": "7.2", "7.3~rc1-1~exp1": "7.3"} {
		assert.Equal(t, want, majorMinor(in), "majorMinor(%q)", in)
	}
}

func TestDepends(t *testing.T) {
	got := depends("dracut | initramfs-tools (>= 0.120+deb8u2), linux-binary-7.2.13+deb14-cloud-amd64 (= 7.2.13-1), kmod")
	want := []string{"dracut", "initramfs-tools", "linux-binary-7.2.13+deb14-cloud-amd64", "kmod"}
	require.Equal(t, want, got, "depends()")
}
