package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	tc "github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/xdpshield/xdpshield/e2e"
	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/service"
	"github.com/xdpshield/xdpshield/shield"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// Image targets of the Dockerfile.
const (
	ImageShield = "shield"
	ImageEdge   = "edge"
	ImageStorm  = "storm"
)

// ImageRef is the tag the lane gives target's image.
func ImageRef(target string) string { return "xdps-" + target + ":lane" }

// BuildImages builds the three images FROM scratch out of the static
// binaries (CGO_ENABLED=0) bin (cmd/shield) and lab (cmd/shieldlab, the
// edge's and the storm's agents) with testcontainers' FromDockerfile: the
// Dockerfile of this package and the binaries, copied into a temporary
// build context.
func BuildImages(ctx context.Context, p *tc.DockerProvider, dockerfile, bin, lab string) error {
	dir, err := os.MkdirTemp("", "xdps-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for src, dst := range map[string]string{dockerfile: "Dockerfile", bin: "shield", lab: "shieldlab"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o755); err != nil {
			return err
		}
	}
	for _, target := range []string{ImageShield, ImageEdge, ImageStorm} {
		ref := ImageRef(target)
		repo, tag, _ := strings.Cut(ref, ":")
		req := &tc.ContainerRequest{FromDockerfile: tc.FromDockerfile{
			Context: dir, Dockerfile: "Dockerfile", Repo: repo, Tag: tag, KeepImage: true,
			BuildOptionsModifier: func(o *client.ImageBuildOptions) { o.Target = target },
		}}
		if _, err := p.BuildImage(ctx, req); err != nil {
			return fmt.Errorf("build image %s: %w", ref, err)
		}
	}
	return nil
}

// RemoveImages removes the lane's images.
func RemoveImages(ctx context.Context, p *tc.DockerProvider) error {
	var errs []error
	for _, target := range []string{ImageShield, ImageEdge, ImageStorm} {
		if _, err := p.Client().ImageRemove(ctx, ImageRef(target), client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
			errs = append(errs, fmt.Errorf("remove image %s: %w", ImageRef(target), err))
		}
	}
	return errors.Join(errs...)
}

// Pin roots of the lane's tests under /sys/fs/bpf: prefix and test pid.
const (
	LanePinPrefix = "xdps-lane-"
	CapsPinPrefix = "xdps-caps-"
)

// RemoveStalePinRoots removes the pin roots of lane tests whose process is
// gone (killed before its cleanup). Only these names are touched.
func RemoveStalePinRoots() {
	for _, prefix := range []string{LanePinPrefix, CapsPinPrefix} {
		for _, d := range topo.StaleDirs("/sys/fs/bpf", prefix) {
			os.RemoveAll(d)
		}
	}
}

// ShieldCaps is the least the shield container runs with on Docker 20.10
// (which does not know CAP_BPF): every other capability is dropped. The
// lane proves it is enough (the storm) and needed (a container without it
// exits non-zero naming it).
var ShieldCaps = []string{"CAP_SYS_ADMIN"}

// Lane is a parts.Deployment of containers on one daemon: the edge and the
// storm in containers of network mode none that Run wires, the shield in a
// container sharing the edge's namespace.
type Lane struct {
	// Provider creates the containers (NewProvider).
	Provider *tc.DockerProvider
	// Dir holds, per container, what is bind-mounted into it: edge/ and
	// storm/ (their agents' sockets), shield/ (its configuration and
	// token).
	Dir string
	// PinRoot is a directory of the host's bpffs, mounted as the shield
	// container's /sys/fs/bpf: its pins outlive the container.
	PinRoot string
	// ShieldCaps are the shield container's capabilities (ShieldCaps
	// when nil).
	ShieldCaps []string
	Logf       func(format string, args ...any)

	edge, storm, sh tc.Container
	shieldReq       tc.ContainerRequest
	maps            *shield.Shield // the service's pinned maps, opened by the test
	pinDir          string         // the service's pin directory, as the host sees it
	top             *storm.Topology
}

var _ parts.Deployment = (*Lane)(nil)
var _ parts.Restarter = (*Lane)(nil)

func (l *Lane) logf(format string, args ...any) {
	if l.Logf != nil {
		l.Logf(format, args...)
	}
}

// NewProvider is a testcontainers provider whose default network is
// "none": testcontainers would otherwise create a bridge network (a bridge
// in the root namespace) for containers the daemon has no bridge for.
func NewProvider() (*tc.DockerProvider, error) {
	return tc.NewDockerProvider(tc.WithDefaultBridgeNetwork("none"))
}

// Start creates and starts the container of req, and waits as it says; on
// an error after the creation the container is returned too, for removal.
func Start(ctx context.Context, p *tc.DockerProvider, req tc.ContainerRequest) (tc.Container, error) {
	c, err := p.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	return c, c.Start(ctx)
}

// agentRequest is a container of image target with network mode none
// running its agent, dir bind-mounted as /run/xdps.
func agentRequest(target, dir string, caps []string) tc.ContainerRequest {
	return tc.ContainerRequest{
		Image:      ImageRef(target),
		WaitingFor: wait.ForLog("agent serving").WithStartupTimeout(time.Minute),
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "none"
			hc.CapAdd = caps
			hc.Binds = []string{dir + ":/run/xdps"}
			// Docker turns IPv6 off in a container's namespace; the
			// storm speaks both families.
			hc.Sysctls = map[string]string{"net.ipv6.conf.all.disable_ipv6": "0", "net.ipv6.conf.default.disable_ipv6": "0"}
		},
	}
}

// Namespaces starts the edge and storm containers and names their
// namespaces for Run to wire.
func (l *Lane) Namespaces() (edge, storm *topo.NS, err error) {
	ctx := context.Background()
	for _, d := range []string{"edge", "storm", "shield"} {
		if err := os.MkdirAll(filepath.Join(l.Dir, d), 0o700); err != nil {
			return nil, nil, err
		}
	}
	// The edge's datagram service sizes its buffer with SO_RCVBUFFORCE
	// (CAP_NET_ADMIN); the storm's generators load and run BPF and write
	// raw frames.
	if l.edge, err = Start(ctx, l.Provider, agentRequest(ImageEdge, filepath.Join(l.Dir, "edge"), []string{"CAP_NET_ADMIN"})); err != nil {
		return nil, nil, fmt.Errorf("edge container: %w", err)
	}
	if l.storm, err = Start(ctx, l.Provider, agentRequest(ImageStorm, filepath.Join(l.Dir, "storm"), []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_NET_RAW"})); err != nil {
		return nil, nil, fmt.Errorf("storm container: %w", err)
	}
	if edge, err = attach(ctx, "edge", l.edge); err != nil {
		return nil, nil, err
	}
	if storm, err = attach(ctx, "storm", l.storm); err != nil {
		edge.Close()
		return nil, nil, err
	}
	return edge, storm, nil
}

func attach(ctx context.Context, role string, c tc.Container) (*topo.NS, error) {
	in, err := c.Inspect(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect %s container: %w", role, err)
	}
	if in.State == nil || in.State.Pid == 0 {
		return nil, fmt.Errorf("%s container is not running", role)
	}
	return topo.Attach(role, in.State.Pid)
}

// ShieldConfig is the service's configuration file for cfg
// (e2e.ContainerShieldConfig, which cmd/shield's tests read back with the
// real loader outside this module).
func ShieldConfig(cfg service.Config) string { return e2e.ContainerShieldConfig(cfg) }

// shieldAPI is where the shield container's API listens, inside the edge's
// namespace.
const shieldAPI = e2e.ContainerAPI

// shieldRun is the shield container's settings: `shield serve -config` in
// the namespace of the container edge, every capability dropped but caps,
// pinRoot (on the host's bpffs) as its /sys/fs/bpf and confDir (the
// configuration and token) as /etc/xdpshield, read-only. ShieldRequest and
// RunLine both read them from here.
func shieldRun(edge, pinRoot, confDir string, caps []string) (network string, capDrop, capAdd, binds, cmd []string) {
	return "container:" + edge, []string{"ALL"}, caps,
		[]string{pinRoot + ":/sys/fs/bpf", confDir + ":/etc/xdpshield:ro"},
		[]string{"-config", "/etc/xdpshield/shield.toml"}
}

// ShieldRequest is the shield container beside the container edgeID (see
// shieldRun), with env and waiting as waitFor says.
func ShieldRequest(edgeID, pinRoot, confDir string, caps []string, env map[string]string, waitFor wait.Strategy) tc.ContainerRequest {
	network, capDrop, capAdd, binds, cmd := shieldRun(edgeID, pinRoot, confDir, caps)
	return tc.ContainerRequest{
		Image:      ImageRef(ImageShield),
		Cmd:        cmd,
		Env:        env,
		WaitingFor: waitFor,
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = container.NetworkMode(network)
			hc.CapDrop = capDrop
			hc.CapAdd = capAdd
			hc.Binds = binds
		},
	}
}

// RunLine is ShieldRequest as a `docker run` command line (docs/container.md's),
// for a container named xdpshield beside the container edge, with the
// host's bpffs and /etc/xdpshield.
func RunLine(edge string, caps []string) string {
	network, capDrop, capAdd, binds, cmd := shieldRun(edge, "/sys/fs/bpf", "/etc/xdpshield", caps)
	args := []string{"docker", "run", "-d", "--name", "xdpshield", "--network", network}
	for _, c := range capDrop {
		args = append(args, "--cap-drop", c)
	}
	for _, c := range capAdd {
		args = append(args, "--cap-add", c)
	}
	for _, b := range binds {
		args = append(args, "-v", b)
	}
	args = append(args, ImageRef(ImageShield))
	return strings.Join(append(args, cmd...), " ")
}

// StartShield writes the configuration and token, starts the shield
// container and opens its pinned maps for Run to read.
func (l *Lane) StartShield(top *storm.Topology, cfg service.Config) (parts.ShieldSide, error) {
	l.top = top
	conf := filepath.Join(l.Dir, "shield")
	if err := os.WriteFile(filepath.Join(conf, "shield.toml"), []byte(ShieldConfig(cfg)), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "token"), []byte(cfg.API.Token+"\n"), 0o600); err != nil {
		return nil, err
	}
	caps := l.ShieldCaps
	if caps == nil {
		caps = ShieldCaps
	}
	l.shieldReq = ShieldRequest(l.edge.GetContainerID(), l.PinRoot, conf, caps, nil,
		wait.ForLog("msg=serving").WithStartupTimeout(time.Minute))
	var err error
	if l.sh, err = Start(context.Background(), l.Provider, l.shieldReq); err != nil {
		return nil, fmt.Errorf("shield container: %w", err)
	}
	if err := top.Edge.Do(func() error {
		var err error
		l.pinDir, err = pin.PinDir(filepath.Join(l.PinRoot, "xdpshield"), storm.EdgeDev)
		return err
	}); err != nil {
		return nil, err
	}
	if l.maps, err = shield.Load(shield.Options{TableSize: cfg.TableSize, PinPath: l.pinDir}); err != nil {
		return nil, fmt.Errorf("open the shield container's pinned maps %s: %w", l.pinDir, err)
	}
	return l, nil
}

func (l *Lane) Shield() *shield.Shield { return l.maps }
func (l *Lane) APIAddr() string        { return shieldAPI }

// Detach stops the shield container (its link stays pinned) and removes
// its pins: the program leaves edge0.
func (l *Lane) Detach() error {
	if err := l.stopShield(); err != nil {
		return err
	}
	return l.top.Edge.Do(func() error { return pin.Detach(filepath.Join(l.PinRoot, "xdpshield"), storm.EdgeDev) })
}

func (l *Lane) stopShield() error {
	if l.sh == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	timeout := 10 * time.Second
	if err := l.sh.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("stop shield container: %w", err)
	}
	if st, err := l.sh.State(ctx); err == nil && st.ExitCode != 0 {
		l.logf("shield container exited %d:\n%s", st.ExitCode, containerLogs(ctx, l.sh))
		return fmt.Errorf("shield container exited %d", st.ExitCode)
	}
	return nil
}

// Close stops and removes the shield container and removes its pins.
func (l *Lane) Close() error {
	var errs []error
	if l.sh != nil {
		errs = append(errs, l.sh.Terminate(context.Background()))
		l.sh = nil
	}
	if l.maps != nil {
		errs = append(errs, l.maps.Close())
	}
	if _, err := os.Stat(l.pinDir); l.top != nil && l.pinDir != "" && err == nil {
		errs = append(errs, l.top.Edge.Do(func() error { return pin.Detach(filepath.Join(l.PinRoot, "xdpshield"), storm.EdgeDev) }))
	}
	return errors.Join(errs...)
}

func (l *Lane) StartEdge(top *storm.Topology, udpCapacity float64) (parts.EdgeSide, error) {
	return parts.RemoteEdge(filepath.Join(l.Dir, "edge"), udpCapacity)
}

func (l *Lane) StartStorm(top *storm.Topology, kind string) (parts.StormSide, error) {
	return parts.RemoteStorm(filepath.Join(l.Dir, "storm"), kind)
}

// RestartShield stops the shield container, removes it, leaves the edge a
// second with no service at all (the pinned program alone), then starts a
// new container from the same request and waits for it to serve.
func (l *Lane) RestartShield(ctx context.Context) (parts.RestartStats, error) {
	var st parts.RestartStats
	linkID := func() (uint32, error) {
		lk, err := link.LoadPinnedLink(filepath.Join(l.pinDir, "link"), nil)
		if err != nil {
			return 0, err
		}
		defer lk.Close()
		info, err := lk.Info()
		if err != nil {
			return 0, err
		}
		return uint32(info.ID), nil
	}
	var err error
	if st.LinkBefore, err = linkID(); err != nil {
		return st, fmt.Errorf("pinned link before: %w", err)
	}
	began := time.Now()
	if err := l.stopShield(); err != nil {
		return st, err
	}
	if err := l.sh.Terminate(ctx); err != nil {
		return st, fmt.Errorf("remove shield container: %w", err)
	}
	l.sh = nil
	c1, err := l.maps.Counters()
	if err != nil {
		return st, err
	}
	select {
	case <-ctx.Done():
		return st, ctx.Err()
	case <-time.After(time.Second):
	}
	c2, err := l.maps.Counters()
	if err != nil {
		return st, err
	}
	d := c2.Sub(c1)
	st.DropsDown = d.Verdict(counter.Drop)
	if l.sh, err = Start(ctx, l.Provider, l.shieldReq); err != nil {
		return st, fmt.Errorf("new shield container: %w", err)
	}
	st.DownMs = float64(time.Since(began)) / 1e6
	logs := containerLogs(ctx, l.sh)
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "adopted pinned shield") {
			st.Adopted, st.AdoptedNote = true, line
		}
	}
	if st.LinkAfter, err = linkID(); err != nil {
		return st, fmt.Errorf("pinned link after: %w", err)
	}
	return st, nil
}

// containerLogs is what c wrote so far.
func containerLogs(ctx context.Context, c tc.Container) string {
	rc, err := c.Logs(ctx)
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

// Terminate removes the edge and storm containers.
func (l *Lane) Terminate() error {
	var errs []error
	for _, c := range []tc.Container{l.storm, l.edge} {
		if c != nil {
			errs = append(errs, c.Terminate(context.Background()))
		}
	}
	l.storm, l.edge = nil, nil
	return errors.Join(errs...)
}
