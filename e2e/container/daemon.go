package container

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/prometheus/procfs"

	"github.com/xdpshield/xdpshield/internal/topo"
)

// DaemonArgs are the flags that keep the daemon from changing the host's
// network: no iptables or ip6tables rules, no forwarding or masquerading
// sysctl, no docker0 bridge. Containers get network mode none (or another
// container's namespace) and nothing else.
var DaemonArgs = []string{"--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none"}

// Daemon is a dockerd this process started, with everything of it under
// Dir: data root, exec root, pid file and socket.
type Daemon struct {
	Dir    string
	Socket string
	cmd    *exec.Cmd
	done   chan error
	logf   *os.File
}

// Host is the daemon's address for a Docker client (DOCKER_HOST).
func (d *Daemon) Host() string { return "unix://" + d.Socket }

// StartDaemon starts dockerd under a fresh temporary directory and waits up
// to timeout for its API. The error says why it could not start (no
// dockerd, no containerd, its log's last lines).
func StartDaemon(timeout time.Duration) (*Daemon, error) {
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, fmt.Errorf("no dockerd (Debian docker.io; ci/deps.sh installs it): %w", err)
	}
	removeStaleDaemons()
	dir, err := os.MkdirTemp("", daemonDirPrefix)
	if err != nil {
		return nil, err
	}
	return start(bin, dir, timeout)
}

func start(bin, root string, timeout time.Duration) (*Daemon, error) {
	d := &Daemon{Dir: root, Socket: filepath.Join(root, "docker.sock"), done: make(chan error, 1)}
	var err error
	if d.logf, err = os.Create(filepath.Join(root, "dockerd.log")); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	args := append([]string{
		"--data-root", filepath.Join(root, "data"),
		"--exec-root", filepath.Join(root, "exec"),
		"--pidfile", filepath.Join(root, "dockerd.pid"),
		"--host", d.Host(),
		// Its own containerd, under the exec root: never the host's.
		"--containerd-namespace", "xdps", "--containerd-plugins-namespace", "xdps-plugins",
		// Its containers' cgroups under one of its own, removed by Close.
		"--cgroup-parent", "/" + filepath.Base(root),
	}, DaemonArgs...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.logf, d.logf
	// Its own process group: a signal to the test's group leaves it be,
	// and Close can kill it and its containerd together.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		d.logf.Close()
		os.RemoveAll(root)
		return nil, fmt.Errorf("start dockerd: %w", err)
	}
	// Whose daemon this is: removeStaleDaemons stops it if this process
	// dies without Close.
	os.WriteFile(filepath.Join(root, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600)
	go func() { d.done <- d.cmd.Wait() }()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-d.done:
			d.done <- err
			tail := d.logTail(8)
			d.Close()
			return nil, fmt.Errorf("dockerd exited: %v\n%s", err, tail)
		case <-time.After(200 * time.Millisecond):
		}
		if c, err := net.Dial("unix", d.Socket); err == nil {
			c.Close()
			if d.ping() == nil {
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			tail := d.logTail(8)
			d.Close()
			return nil, fmt.Errorf("dockerd did not answer within %v:\n%s", timeout, tail)
		}
	}
}

// ping asks the API for /_ping.
func (d *Daemon) ping() error {
	c, err := net.DialTimeout("unix", d.Socket, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")); err != nil {
		return err
	}
	b := make([]byte, 64)
	n, _ := c.Read(b)
	if !strings.Contains(string(b[:n]), " 200 ") {
		return fmt.Errorf("ping: %q", b[:n])
	}
	return nil
}

// daemonDirPrefix starts the name of every daemon's temporary directory.
const daemonDirPrefix = "xdps-dockerd-"

// removeStaleDaemons stops the daemons of test processes that died without
// Close (their owner.pid names a process that is gone) and removes their
// directories. Only directories this package makes are touched.
func removeStaleDaemons() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), daemonDirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner == os.Getpid() || topo.Alive(owner) {
			continue
		}
		// dockerd, its containerd and the containers' shims all name the
		// directory on their command lines; the containers themselves are
		// in its cgroups (removeCgroups).
		killNaming(dir + "/")
		time.Sleep(time.Second)
		unmountUnder(dir)
		removeCgroups(filepath.Base(dir))
		os.RemoveAll(dir)
	}
}

// killNaming kills every process whose command line contains s
// (prometheus/procfs reads them).
func killNaming(s string) {
	procs, _ := procfs.AllProcs()
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil || !strings.Contains(strings.Join(args, "\x00"), s) || p.PID == os.Getpid() {
			continue
		}
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
}

// removeCgroups kills what is left in the cgroups named name (in every
// hierarchy: cgroup v1 or v2) and removes them, deepest first.
func removeCgroups(name string) error {
	tops, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", name))
	more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", name))
	var errs []error
	for _, top := range append(tops, more...) {
		var dirs []string
		filepath.WalkDir(top, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if b, err := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs")); err == nil {
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			var err error
			for range 50 { // a killed process leaves its cgroup soon after
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// logTail is the last n lines of the daemon's log.
func (d *Daemon) logTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "dockerd.log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Close stops the daemon (SIGTERM, then SIGKILL to its group after 20 s)
// and removes its directory: data root (images, containers), exec root
// and socket.
func (d *Daemon) Close() error {
	var errs []error
	if d.cmd != nil && d.cmd.Process != nil {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
			errs = append(errs, errors.New("dockerd did not stop within 20 s: killed"))
		}
	}
	if d.logf != nil {
		d.logf.Close()
	}
	// Mounts the daemon left (overlays, its exec root's netns files) go
	// before the directory.
	unmountUnder(d.Dir)
	if err := removeCgroups(filepath.Base(d.Dir)); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(d.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", d.Dir, err))
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount below dir, deepest first
// (moby/sys/mountinfo lists them in mount order).
func unmountUnder(dir string) {
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !strings.HasPrefix(m.Mountpoint, dir+"/"), false
	})
	if err != nil {
		return
	}
	for i := len(ms) - 1; i >= 0; i-- {
		syscall.Unmount(ms[i].Mountpoint, syscall.MNT_DETACH)
	}
}
