package lb

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpshield/xdpshield/internal/testutil"
)

// helperEnv, when set in the environment as "NETNS ADDR:PORT", makes the
// test binary a one-shot client: it enters the namespace, connects over
// TCP, asks once, prints the answer and exits. TestOutside runs it in a
// chosen cgroup (clone3 with CLONE_INTO_CGROUP).
const helperEnv = "XDPSHIELD_LB_HELPER"

func TestMain(m *testing.M) {
	if arg := os.Getenv(proxyEnv); arg != "" {
		if err := proxyMain(arg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if arg := os.Getenv(helperEnv); arg != "" {
		if err := helperMain(arg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func helperMain(arg string) error {
	name, dst, ok := strings.Cut(arg, " ")
	if !ok {
		return fmt.Errorf("helper: bad argument %q", arg)
	}
	c, err := testutil.DialFromNetns(name, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("?\n")); err != nil {
		return err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(buf[:n])
	return err
}

// helper runs the one-shot client as a new process born in cgroup dir.
func (e *env) helper(dir string, dst netip.AddrPort) (reply, error) {
	cg, err := os.Open(dir)
	if err != nil {
		return reply{}, err
	}
	defer cg.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+e.client.Name+" "+dst.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return reply{}, fmt.Errorf("helper in %s: %w: %s", dir, err, errb.String())
	}
	return parseReply(out.String())
}
