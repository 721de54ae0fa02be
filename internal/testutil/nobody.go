package testutil

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Nobody is the uid and gid the local-user tests run their attacker as.
const Nobody = 65534

// NobodyCmd runs this test binary again as uid and gid Nobody, with env
// added to the environment (the package's TestMain reads it and plays
// the attacker). Root only.
func NobodyCmd(t testing.TB, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(NobodyBinary(t))
	cmd.Dir = filepath.Dir(cmd.Path)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: Nobody, Gid: Nobody}}
	return cmd
}

// NobodyBinary is a copy of this test binary that nobody may run: go
// test's own build directory is private to root. Root only.
func NobodyBinary(t testing.TB) string {
	t.Helper()
	Root(t)
	dir, err := os.MkdirTemp("", "shield-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "attacker.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
