package service

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// TestDialAdminChecksThePeer (issue 23, finding 4): the CLI sends its
// token through the admin socket only to a process of root (or its own
// user, or the directory's owner). A socket nobody listens on, even one
// made to look root's (root's directory, the socket file chowned to
// root), is refused by its peer credentials; a socket in a directory
// others may write is refused before it is dialled.
func TestDialAdminChecksThePeer(t *testing.T) {
	testutil.Root(t)
	base, err := os.MkdirTemp("", "shield-admin-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	dir := filepath.Join(base, "run")
	require.NoError(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "api.sock")

	// nobody binds while the directory is theirs; then root takes the
	// directory and the socket file back.
	require.NoError(t, os.Chown(dir, testutil.Nobody, testutil.Nobody))
	cmd := testutil.NobodyCmd(t, envListenUnix+"="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "listening\n", line)
	require.NoError(t, os.Chown(dir, 0, 0))
	require.NoError(t, os.Lchown(path, 0, 0))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = DialAdmin(ctx, path)
	require.Error(t, err, "DialAdmin to a socket nobody listens on")
	assert.Contains(t, err.Error(), "served by uid 65534")

	// A directory others may write: refused before dialling.
	require.NoError(t, os.Chmod(dir, 0o777))
	_, err = DialAdmin(ctx, path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "others may write it")

	// The service's own socket (this process, root) is accepted.
	require.NoError(t, os.Chmod(dir, 0o755))
	ln, got, err := listenAdmin(filepath.Join(base, "svc"), "127.0.0.1:9470")
	require.NoError(t, err)
	defer ln.Close()
	c, err := DialAdmin(ctx, got)
	require.NoError(t, err, "DialAdmin to root's own admin socket")
	c.Close()
}
