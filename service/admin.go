package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultAdminDir is where `shield serve` makes its admin socket: a
// directory only root (the service's user) may write.
const DefaultAdminDir = "/run/xdpshield"

// The admin socket (issue 23, finding 4): with serve down, nobody bound
// 127.0.0.1:9470 and the CLI sent it the operator's token. A TCP port on
// loopback is anyone's to bind; a unix socket in a directory only the
// service's user may write is not, and its peer's credentials
// (SO_PEERCRED) say who listens. The CLI talks to a local service through
// it, and checks both before it sends anything.

// AdminSocket is the admin socket's path in dir for an API listening on
// listen, in the calling thread's network namespace: one socket per
// namespace and port, as the TCP address it stands beside.
func AdminSocket(dir, listen string) (string, error) {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return "", fmt.Errorf("api address %q: %w", listen, err)
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", fmt.Errorf("identify the network namespace: %w", err)
	}
	return filepath.Join(dir, "netns-"+strconv.FormatUint(st.Ino, 10)+"."+strconv.Itoa(int(ap.Port()))+".sock"), nil
}

// CheckAdminDir refuses a directory another user could write, or one an
// untrusted user could have made: a socket in it could be anyone's. It
// returns the directory's owner, which is root, the caller's own user, or
// a user root gave it to (the directory's parent is root's and writable
// by no one else: a service running as a user of its own).
func CheckAdminDir(dir string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return 0, fmt.Errorf("admin directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("admin directory %s is not a directory (a symlink?)", dir)
	}
	if st.Mode&0o022 != 0 {
		return 0, fmt.Errorf("admin directory %s has mode %04o: others may write it", dir, st.Mode&0o7777)
	}
	if trustedUID(st.Uid) {
		return st.Uid, nil
	}
	var pst unix.Stat_t
	if err := unix.Stat(filepath.Dir(dir), &pst); err == nil && pst.Uid == 0 && pst.Mode&0o022 == 0 {
		return st.Uid, nil
	}
	return 0, fmt.Errorf("admin directory %s belongs to uid %d, not to root or uid %d, in a directory others may write", dir, st.Uid, os.Geteuid())
}

// errNoAdminDir: the directory could not be made (a read-only root): the
// service runs without an admin socket rather than not at all.
var errNoAdminDir = errors.New("no admin socket")

func trustedUID(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// listenAdmin makes dir (mode 0755) if needed, checks it, and binds the
// admin socket in it (mode 0666: every local user may read through it,
// as through loopback; changes need the token). A socket left by a dead
// service is replaced; one a live service answers on is refused.
func listenAdmin(dir, listen string) (net.Listener, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("admin directory: %w: %w", err, errNoAdminDir)
	}
	if owner, err := CheckAdminDir(dir); err != nil {
		return nil, "", err
	} else if !trustedUID(owner) {
		return nil, "", fmt.Errorf("admin directory %s belongs to uid %d, not to the service's uid %d", dir, owner, os.Geteuid())
	}
	path, err := AdminSocket(dir, listen)
	if err != nil {
		return nil, "", err
	}
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, "", fmt.Errorf("admin socket %s: another shield serve answers on it (same namespace and port)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, "", fmt.Errorf("remove stale admin socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, "", fmt.Errorf("admin socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("admin socket: %w", err)
	}
	return ln, path, nil
}

// DialAdmin connects to the admin socket at path after checking its
// directory, and returns the connection only when the process listening
// on it is root's, the caller's own user's or the directory owner's
// (SO_PEERCRED).
func DialAdmin(ctx context.Context, path string) (net.Conn, error) {
	owner, err := CheckAdminDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	trusted := func(uid uint32) bool { return trustedUID(uid) || uid == owner }
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("no admin socket %s: is `shield serve` running in this network namespace? "+
				"(the CLI sends nothing to a loopback TCP port, which any local user may have bound)", path)
		}
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || !trusted(st.Uid) {
		return nil, fmt.Errorf("admin socket %s is not a socket of root, uid %d or the directory's owner", path, os.Geteuid())
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	uid, err := unixPeerUID(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("admin socket %s: peer credentials: %w", path, err)
	}
	if !trusted(uid) {
		c.Close()
		return nil, fmt.Errorf("admin socket %s: served by uid %d, not by root, uid %d or the directory's owner: refusing to talk to it", path, uid, os.Geteuid())
	}
	return c, nil
}
