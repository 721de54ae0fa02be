package cli

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// readTokenFile reads the operator token from a regular file only its owner
// can read or write (mode 0600 or stricter). It opens without blocking: a
// FIFO would otherwise hold serve in open(), deaf to SIGTERM.
func readTokenFile(path string) (string, error) { return ReadToken(path, false) }

// ReadToken is readTokenFile, and with mine the file must also belong to
// the user this process runs as: the service's token file (and the
// workbench's credential), or another user wrote the token it accepts
// (issue 23, finding 9).
func ReadToken(path string, mine bool) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("stat token file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); mine && ok && int(sys.Uid) != os.Geteuid() {
		return "", fmt.Errorf("token file %s belongs to uid %d, not to uid %d the service runs as: another user chose this token; chown it", path, sys.Uid, os.Geteuid())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %04o: others may read it; chmod 600 it", path, perm)
	}
	b := make([]byte, 4097)
	n, _ := f.Read(b)
	if n > 4096 {
		return "", fmt.Errorf("token file %s is longer than 4096 bytes", path)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if len(tok) < 16 {
		return "", fmt.Errorf("token in %s is shorter than 16 characters", path)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token in %s contains whitespace", path)
	}
	return tok, nil
}
