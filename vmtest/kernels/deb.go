package kernels

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// arMember finds member name (or, when name ends in ".", the first member
// with that prefix, e.g. "data.tar.") in a Debian package (an ar archive)
// and returns a reader over it and its full name.
func arMember(r io.Reader, prefix string) (io.Reader, string, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, 8)
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != "!<arch>\n" {
		return nil, "", errors.New("not an ar archive")
	}
	hdr := make([]byte, 60)
	for {
		if _, err := io.ReadFull(br, hdr); err != nil {
			return nil, "", fmt.Errorf("no member %s*: %w", prefix, err)
		}
		name := strings.TrimRight(strings.TrimSpace(string(hdr[0:16])), "/")
		size, err := strconv.ParseInt(strings.TrimSpace(string(hdr[48:58])), 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("ar member %q: bad size", name)
		}
		if strings.HasPrefix(name, prefix) {
			return io.LimitReader(br, size), name, nil
		}
		if _, err := br.Discard(int(size + size%2)); err != nil {
			return nil, "", fmt.Errorf("ar member %q: %w", name, err)
		}
	}
}

// decompress returns a reader of r's content decompressed according to
// name's suffix: gzip with the standard library, xz and zstd with Debian's
// command-line tools (no extra Go dependency). wait must be called after
// the reader is drained.
func decompress(r io.Reader, name string) (io.Reader, func() error, error) {
	var tool string
	switch {
	case strings.HasSuffix(name, ".gz"):
		z, err := gzip.NewReader(r)
		return z, func() error { return nil }, err
	case strings.HasSuffix(name, ".xz"):
		tool = "xz"
	case strings.HasSuffix(name, ".zst"):
		tool = "zstd"
	case strings.HasSuffix(name, ".tar"), strings.HasSuffix(name, ".ko"):
		return r, func() error { return nil }, nil
	default:
		return nil, nil, fmt.Errorf("%s: unknown compression", name)
	}
	cmd := exec.Command(tool, "-dc")
	cmd.Stdin = r
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("%s -dc (is %s installed? ci/deps.sh installs it): %w", tool, tool, err)
	}
	return out, func() error {
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%s -dc %s: %w: %s", tool, name, err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}, nil
}

// walkDeb calls fn for every regular file of the package's data archive,
// with the path cleaned of its leading "./".
func walkDeb(path string, fn func(name string, hdr *tar.Header, r io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, name, err := arMember(f, "data.tar")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	dr, wait, err := decompress(m, name)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(dr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, name, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		if err := fn(strings.TrimPrefix(hdr.Name, "./"), hdr, tr); err != nil {
			return err
		}
	}
	io.Copy(io.Discard, dr)
	return wait()
}
