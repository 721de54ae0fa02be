package study

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/xdpshield/xdpshield/e2e/parts"
	"github.com/xdpshield/xdpshield/internal/topo"
	"github.com/xdpshield/xdpshield/l7"
	"github.com/xdpshield/xdpshield/l7/policy"
	"github.com/xdpshield/xdpshield/study/peers"
	"github.com/xdpshield/xdpshield/study/proc"
	"github.com/xdpshield/xdpshield/study/results"
)

// l7Port is where each proxy listens in the L7 namespace, by target.
var l7Port = map[string]int{"fast path": 18001, "go proxy": 18002, "haproxy": 18003, "nginx": 18004}

// l7Policy is the policy every proxy enforces in the comparison: the
// differential suite's (routes by Host and by path prefix, an RBAC deny
// rule, a hash header), without set_header, which the kernel does not
// implement (every request would be passed up to the Go proxy).
func l7Policy(backend string) policy.Config {
	return policy.Config{
		Routes: []policy.Route{
			{Name: "api", Host: "api.test", PathPrefix: "/v1/", Backends: []string{backend}},
			{Name: "all", PathPrefix: "/", Backends: []string{backend}},
		},
		RBAC:       []policy.Rule{{Action: "deny", PathPrefix: "/admin"}},
		HashHeader: "X-User",
	}
}

// l7Plan is what the L7 section measures.
type l7Plan struct {
	loads  []string
	conns  []string
	bodies []int
	conc   int
	rate   float64
	phase  time.Duration
}

func (s *study) l7Plan() l7Plan {
	if s.opt.Quick {
		return l7Plan{loads: []string{results.L7Closed}, conns: []string{"keep-alive"}, bodies: []int{2}, conc: 4, rate: 1000, phase: 300 * time.Millisecond}
	}
	return l7Plan{loads: []string{results.L7Closed, results.L7Fixed}, conns: results.L7Conns, bodies: results.L7Bodies, conc: 4, rate: 2000, phase: s.opt.Phase / 4}
}

func (p l7Plan) steps(runs int) int { return runs * len(p.loads) * len(p.conns) * len(p.bodies) }

// l7Env is the L7 comparison's namespace: a backend (in this process), the
// Go proxy with and without its fast path, HAProxy and nginx, each in a
// process of its own so its CPU time is its own.
type l7Env struct {
	ns    *topo.NS
	dir   string
	back  *http.Server
	procs map[string]*exec.Cmd
	addr  map[string]string
}

func (e *l7Env) close() {
	for _, c := range e.procs {
		stopProc(c)
	}
	if e.back != nil {
		e.back.Close()
	}
	if e.ns != nil {
		e.ns.Close()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

func stopProc(c *exec.Cmd) {
	if c == nil || c.Process == nil {
		return
	}
	c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.Process.Kill()
		<-done
	}
}

// peerVersion is the first line a peer prints of its version.
func peerVersion(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return "not found: " + err.Error()
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// l7Section runs the L7 comparison: rounds interleaved, every target in
// turn at the same load.
func (s *study) l7Section(ctx context.Context) error {
	plan := s.l7Plan()
	res := &results.L7Results{Versions: map[string]string{}, Conns: plan.conc, Rate: plan.rate, Seconds: plan.phase.Seconds()}
	s.res.L7 = res
	res.Versions["haproxy"] = peerVersion("haproxy", "-v")
	res.Versions["nginx"] = peerVersion("nginx", "-v")
	e := &l7Env{procs: map[string]*exec.Cmd{}, addr: map[string]string{}}
	defer e.close()
	var err error
	if e.ns, err = topo.New("study-l7"); err != nil {
		return fmt.Errorf("l7: %w", err)
	}
	if e.dir, err = os.MkdirTemp("", "xdpshield-l7-"); err != nil {
		return err
	}
	var ln net.Listener
	if err := e.ns.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:18000"); return err }); err != nil {
		return fmt.Errorf("l7 backend: %w", err)
	}
	e.back = &http.Server{Handler: http.HandlerFunc(l7Backend)}
	go e.back.Serve(ln)
	e.addr["direct"] = ln.Addr().String()
	cfg := l7Policy(ln.Addr().String())

	for _, t := range []string{"fast path", "go proxy"} {
		addr := fmt.Sprintf("127.0.0.1:%d", l7Port[t])
		sec := policy.Section{Listen: addr, Config: cfg}
		if t == "go proxy" {
			sec.FastPath = "off"
		}
		why, err := e.startGo(s.opt.Self, t, sec)
		if err != nil {
			return err
		}
		if t == "fast path" {
			res.FastPath = why
			if why != "attached" {
				res.Skipped = append(res.Skipped, "fast path: "+why)
				stopProc(e.procs[t])
				delete(e.procs, t)
				continue
			}
		}
		e.addr[t] = addr
	}
	haAddr := fmt.Sprintf("127.0.0.1:%d", l7Port["haproxy"])
	if res.HAProxy, err = peers.HAProxy(cfg, haAddr); err != nil {
		return err
	}
	ngAddr := fmt.Sprintf("127.0.0.1:%d", l7Port["nginx"])
	if res.NginxConf, err = peers.Nginx(cfg, ngAddr, e.dir); err != nil {
		return err
	}
	for _, p := range []struct {
		name, addr, file, text string
		args                   []string
	}{
		{"haproxy", haAddr, "haproxy.cfg", res.HAProxy, []string{"-db", "-f"}},
		{"nginx", ngAddr, "nginx.conf", res.NginxConf, []string{"-p", e.dir, "-e", filepath.Join(e.dir, "error.log"), "-c"}},
	} {
		bin, err := exec.LookPath(p.name)
		if err != nil {
			res.Skipped = append(res.Skipped, p.name+": not installed (ci/deps.sh installs it)")
			continue
		}
		f := filepath.Join(e.dir, p.file)
		if err := os.WriteFile(f, []byte(p.text), 0o644); err != nil {
			return err
		}
		cmd := e.ns.Command(bin, append(p.args, f)...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", p.name, err)
		}
		e.procs[p.name] = cmd
		if err := e.waitListen(ctx, p.addr); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		e.addr[p.name] = p.addr
	}
	// Every target answers the policy before it is measured.
	for _, t := range results.L7Targets {
		if a, ok := e.addr[t]; ok {
			if err := e.check(ctx, t, a); err != nil {
				return err
			}
		}
	}
	for run := range s.opt.Runs {
		for _, load := range plan.loads {
			for _, conn := range plan.conns {
				for _, body := range plan.bodies {
					s.bar.step(fmt.Sprintf("run %d/%d L7 %s %s %dB", run+1, s.opt.Runs, load, conn, body))
					for i := range results.L7Targets {
						t := results.L7Targets[(i+run)%len(results.L7Targets)]
						a, ok := e.addr[t]
						if !ok {
							continue
						}
						smp, err := e.measure(ctx, t, a, load, conn, body, plan)
						if err != nil {
							return fmt.Errorf("l7 %s %s %s %d: %w", t, load, conn, body, err)
						}
						smp.Run = run
						c := res.AddCell(t, load, conn, body)
						c.Samples = append(c.Samples, smp)
					}
				}
			}
		}
	}
	return nil
}

// l7Backend answers every request with a body of ?size= bytes (2: "ok").
func l7Backend(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	n, _ := strconv.Atoi(r.URL.Query().Get("size"))
	if n <= 0 {
		n = 2
	}
	w.Header().Set("Content-Length", strconv.Itoa(n))
	for n > 0 {
		k := min(n, len(bodyBytes))
		w.Write(bodyBytes[:k])
		n -= k
	}
}

var bodyBytes = []byte(strings.Repeat("ok", 8192))

// startGo runs the Go proxy (`shieldlab study-l7`) in the namespace and
// returns "attached" when its fast path attached, else why not.
func (e *l7Env) startGo(self, target string, sec policy.Section) (string, error) {
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return "", err
		}
	}
	b, err := json.Marshal(sec)
	if err != nil {
		return "", err
	}
	cmd := e.ns.Command(self, "study-l7")
	cmd.Stdin = strings.NewReader(string(b))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s study-l7: %w", self, err)
	}
	e.procs[target] = cmd
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		why, ok := strings.CutPrefix(l, "ready ")
		if !ok {
			return "", fmt.Errorf("%s: study-l7 said %q", target, l)
		}
		return why, nil
	case <-time.After(10 * time.Second):
		return "", fmt.Errorf("%s: study-l7 not ready after 10 s", target)
	}
}

func (e *l7Env) dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := e.ns.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

func (e *l7Env) waitListen(ctx context.Context, addr string) error {
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := e.dial(ctx, addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// check sends a routed and a denied request to a proxy.
func (e *l7Env) check(ctx context.Context, target, addr string) error {
	c, err := e.dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for _, x := range []struct {
		path string
		want int
	}{{"/item", 200}, {"/admin/x", 403}} {
		if target == "direct" && x.want == 403 {
			continue
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a.test\r\nX-User: u\r\n\r\n", x.path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("%s: GET %s: %w", target, x.path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != x.want {
			return fmt.Errorf("%s: GET %s answered %d, want %d", target, x.path, resp.StatusCode, x.want)
		}
	}
	return nil
}

// measure runs one cell's phase against addr: plan.conc connections
// (each a goroutine on a thread in the namespace), closed loop or together
// at plan.rate, keep-alive or a new connection a request.
func (e *l7Env) measure(ctx context.Context, target, addr, load, conn string, body int, plan l7Plan) (results.L7Sample, error) {
	req := fmt.Sprintf("GET /item?size=%d HTTP/1.1\r\nHost: a.test\r\nX-User: user%%d\r\n\r\n", body)
	var mu sync.Mutex
	var lat []time.Duration
	var errs int
	var firstErr error
	cpu0, err := e.cpu(target)
	if err != nil {
		return results.L7Sample{}, err
	}
	start := time.Now()
	end := start.Add(plan.phase)
	interval := time.Duration(float64(plan.conc) / plan.rate * float64(time.Second))
	var wg sync.WaitGroup
	for w := range plan.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			nerr := 0
			var ferr error
			e.ns.Do(func() error {
				var c net.Conn
				var br *bufio.Reader
				r := fmt.Sprintf(req, w)
				due := start.Add(time.Duration(w) * interval / time.Duration(plan.conc))
				for k := 0; ; k++ {
					if load == results.L7Fixed {
						if d := time.Until(due); d > 0 {
							time.Sleep(d)
						}
					}
					t0 := time.Now()
					if !t0.Before(end) || ctx.Err() != nil {
						break
					}
					if load == results.L7Fixed {
						t0 = due // from when it was due: no coordinated omission
						due = due.Add(interval)
					}
					if c == nil {
						var d net.Dialer
						cc, err := d.DialContext(ctx, "tcp", addr)
						if err != nil {
							nerr++
							ferr = err
							time.Sleep(time.Millisecond)
							continue
						}
						c, br = cc, bufio.NewReader(cc)
					}
					c.SetDeadline(time.Now().Add(5 * time.Second))
					ok := false
					if _, err := io.WriteString(c, r); err == nil {
						if resp, err := http.ReadResponse(br, nil); err == nil {
							n, _ := io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							ok = resp.StatusCode == 200 && n == int64(body)
							if !ok {
								ferr = fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
							}
						} else {
							ferr = err
						}
					} else {
						ferr = err
					}
					if ok {
						local = append(local, time.Since(t0))
					} else {
						nerr++
					}
					if !ok || conn == "new" {
						c.Close()
						c = nil
					}
				}
				if c != nil {
					c.Close()
				}
				return nil
			})
			mu.Lock()
			lat = append(lat, local...)
			errs += nerr
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu1, err := e.cpu(target)
	if err != nil {
		return results.L7Sample{}, err
	}
	smp := results.L7Sample{Seconds: secs, Requests: len(lat) + errs, Errors: errs}
	if len(lat) == 0 {
		return smp, fmt.Errorf("no request answered: %v", firstErr)
	}
	if errs > len(lat)/100 {
		slog.Warn("l7: errors", "target", target, "errors", errs, "ok", len(lat), logErr, firstErr)
	}
	smp.RPS = float64(len(lat)) / secs
	ms := func(q float64) float64 { return float64(parts.Quantile(lat, q)) / 1e6 }
	smp.P50, smp.P99 = ms(0.5), ms(0.99)
	if len(lat) >= results.MinSamples(0.999) { // at least 10 samples beyond it
		smp.P999 = ms(0.999)
	}
	smp.ProxyCPU = cpu1.Proc - cpu0.Proc
	smp.SoftirqCPU = cpu1.Softirq - cpu0.Softirq
	smp.BusyCPU = cpu1.Busy - cpu0.Busy
	smp.CPUPerReq = (smp.ProxyCPU + smp.SoftirqCPU) / float64(len(lat)) * 1e6
	smp.BusyPerReq = smp.BusyCPU / float64(len(lat)) * 1e6
	return smp, nil
}

// cpu reads the CPU time of target's processes (and their children:
// nginx's worker) and the machine's softirq and busy time.
func (e *l7Env) cpu(target string) (proc.CPUReading, error) {
	var r proc.CPUReading
	var err error
	if c := e.procs[target]; c != nil && c.Process != nil {
		r.Proc, err = treeCPU(c.Process.Pid)
		if err != nil {
			return r, err
		}
	}
	m, err := (&proc.Edge{}).Machine()
	r.Softirq, r.Busy = m.Softirq, m.Busy
	return r, err
}

// treeCPU is the user + system time of pid and of its children, seconds
// (prometheus/procfs reads /proc/PID/stat).
func treeCPU(pid int) (float64, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || (p.PID != pid && st.PPID != pid) {
			continue
		}
		total += st.CPUTime()
	}
	if total == 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return 0, errors.New("the proxy's process is gone")
		}
	}
	return total, nil
}

// ServeL7 is the study-l7 process: it reads an policy.Section (JSON) on stdin,
// serves it in the namespace it was started in, says "ready attached" (or
// "ready " and why the fast path does not run) on stdout, and runs until
// ctx ends.
func ServeL7(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	var sec policy.Section
	if err := json.NewDecoder(stdin).Decode(&sec); err != nil {
		return fmt.Errorf("read section: %w", err)
	}
	srv, err := l7.Listen(sec, nil)
	if err != nil {
		return err
	}
	srv.Start(slog.New(slog.NewTextHandler(io.Discard, nil)))
	st, err := srv.Status()
	if err != nil {
		return err
	}
	why := "attached"
	switch {
	case !st.Fast:
		why = "not attached: " + st.FastWhy
	case !st.KernelPolicy:
		why = "policy not in the kernel: " + st.KernelPolicyWhy
	}
	fmt.Fprintln(stdout, "ready "+why)
	<-ctx.Done()
	return srv.Close()
}
