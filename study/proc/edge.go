package proc

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/e2e/storm"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/study/results"
)

// Edge is the edge server running in a process of its own inside the
// edge namespace (`shieldlab study-edge`), so that its CPU time is its own.
type Edge struct {
	cmd *exec.Cmd
	pid int
}

// StartEdge starts self's study-edge command in ns with a certificate made
// here, and returns once it listens.
func StartEdge(self string, ns *topo.NS) (*Edge, *x509.CertPool, error) {
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return nil, nil, fmt.Errorf("find the shield binary: %w", err)
		}
	}
	cert, pool, err := parts.NewCertificate(storm.Edge4, storm.Edge6, storm.Front4, storm.Front6)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	var in strings.Builder
	pem.Encode(&in, &pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	pem.Encode(&in, &pem.Block{Type: "PRIVATE KEY", Bytes: key})
	// `ip netns exec` execs the command in place: the pid is the server's.
	cmd := ns.Command(self, "study-edge")
	cmd.Stdin = strings.NewReader(in.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s study-edge: %w", self, err)
	}
	e := &Edge{cmd: cmd, pid: cmd.Process.Pid}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("study-edge said %q", line)
		}
		ready <- err
		io.Copy(io.Discard, out)
	}()
	select {
	case err := <-ready:
		if err != nil {
			e.Stop()
			return nil, nil, fmt.Errorf("edge server: %w", err)
		}
	case <-time.After(10 * time.Second):
		e.Stop()
		return nil, nil, errors.New("edge server: not ready after 10s")
	}
	return e, pool, nil
}

// Stop ends the edge server: SIGTERM, then SIGKILL after 3 s.
func (e *Edge) Stop() {
	if e.cmd.Process != nil {
		e.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { e.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			e.cmd.Process.Kill()
			<-done
		}
	}
}

// ServeEdge is the study-edge process: it reads a certificate and key
// (PEM) on stdin, serves e2e's edge page on EdgePort and e2e's datagram
// service on DatagramPort of every address of the namespace it was started
// in, says "ready" on stdout, and runs until ctx ends.
func ServeEdge(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	b, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("read certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(b, b)
	if err != nil {
		return fmt.Errorf("parse certificate: %w", err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", storm.EdgePort))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := parts.ServeEdge(ln, cert)
	conn, err := net.ListenUDP("udp", &net.UDPAddr{Port: storm.DatagramPort})
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	udp, err := parts.ServeDatagram(conn, results.UDPCapacity)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ready")
	<-ctx.Done()
	return errors.Join(srv.Close(), udp.Close())
}

// CPUReading is a reading of the CPU time the edge used so far, seconds.
type CPUReading struct {
	Proc    float64 // the edge server process (user + system)
	Softirq float64 // every CPU's softirq time: the XDP, tc, nftables and stack receive work
	Busy    float64 // every CPU's non-idle time: the machine, neighbours included
}

// CPU reads the edge server's CPU time and the machine's from /proc
// (prometheus/procfs: /proc/PID/stat and /proc/stat, in seconds).
func (e *Edge) CPU() (CPUReading, error) {
	var r CPUReading
	p, err := procfs.NewProc(e.pid)
	if err != nil {
		return r, fmt.Errorf("edge server cpu: %w", err)
	}
	ps, err := p.Stat()
	if err != nil {
		return r, fmt.Errorf("edge server cpu: %w", err)
	}
	r.Proc = ps.CPUTime()
	m, err := e.Machine()
	r.Softirq, r.Busy = m.Softirq, m.Busy
	return r, err
}

// Machine reads every CPU's softirq and busy time (proc left zero).
func (e *Edge) Machine() (CPUReading, error) {
	var r CPUReading
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return r, fmt.Errorf("read /proc/stat: %w", err)
	}
	st, err := fs.Stat()
	if err != nil {
		return r, fmt.Errorf("read /proc/stat: %w", err)
	}
	c := st.CPUTotal
	r.Softirq = c.SoftIRQ
	r.Busy = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ
	return r, nil
}
