package workbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xdpshield/xdpshield/internal/flock"
)

// killGrace is how long a storm has to end after SIGINT before its
// process group is killed.
var killGrace = 15 * time.Second

// LabBinary is the lab's binary the page runs a storm with.
const LabBinary = "shieldlab"

// Scenarios a visitor may choose: the storm's -sources.
var Scenarios = []string{"few", "many", "both"}

var (
	errBusy        = errors.New("a storm already runs on this machine; one at a time")
	errUnavailable = errors.New("storms are unavailable")
)

// StormProgress is one line of `shieldlab storm -progress-json`: the live
// state of the phase in progress.
type StormProgress struct {
	Phase    string             `json:"phase"`
	Shield   bool               `json:"shield"`
	Elapsed  float64            `json:"elapsed_seconds"`
	Length   float64            `json:"length_seconds"`
	SentPPS  float64            `json:"sent_pps"`
	PassPPS  float64            `json:"pass_pps"`
	DropPPS  map[string]float64 `json:"drop_pps"`
	P50Ms    map[string]float64 `json:"p50_ms"`
	P99Ms    map[string]float64 `json:"p99_ms"`
	Requests int                `json:"requests"`
	Failures int                `json:"failures"`
	APIOK    bool               `json:"api_ok"`
	Sources  int                `json:"sources"`
}

// StormState is the storm as the page shows it.
type StormState struct {
	Running  bool           `json:"running"`
	Scenario string         `json:"scenario,omitempty"`
	Contrast bool           `json:"contrast"`
	Started  int64          `json:"started,omitempty"` // Unix ms
	Ended    int64          `json:"ended,omitempty"`
	Phases   []string       `json:"phases"` // in the order they began
	Now      *StormProgress `json:"now,omitempty"`
	// Done: OK is whether every assertion held; Failed lists those that
	// did not; Error why the run stopped early.
	Done      bool     `json:"done"`
	OK        bool     `json:"ok"`
	Failed    []string `json:"failed,omitempty"`
	Error     string   `json:"error,omitempty"`
	HasResult bool     `json:"has_result"` // GET Prefix+"storm/result" answers the final table
}

// StormConfig bounds the storms a page starts.
type StormConfig struct {
	// Binary is the lab's shieldlab; empty: beside the running binary,
	// else in PATH.
	Binary string
	// PerHour is how many storms one session may start in an hour.
	PerHour int
	// Phase is each phase's length (the storm's -duration).
	Phase time.Duration
	// LockPath is the storm lock's file (flock.StormLockPath when empty:
	// the one parts.LockStorms takes).
	LockPath string
	// Timeout ends a storm that runs longer (its namespaces are removed
	// by the storm itself on SIGINT, or by the next one).
	Timeout time.Duration
}

// Defaults of StormConfig.
const (
	DefaultPerHour      = 4
	DefaultStormPhase   = 3 * time.Second
	DefaultStormTimeout = 3 * time.Minute
)

// FindLab resolves the lab binary: path when given (it must exist),
// else shieldlab beside this process's binary, else in PATH.
func FindLab(path string) (string, error) {
	if path != "" {
		if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w: lab binary %s is not an executable file", errUnavailable, path)
		}
		return path, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), LabBinary)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(LabBinary)
	if err != nil {
		return "", fmt.Errorf("%w: no %s beside the shield binary nor in PATH (build it with `go build ./cmd/shieldlab`, or set workbench.shieldlab)", errUnavailable, LabBinary)
	}
	return p, nil
}

type stormRunner struct {
	cfg      StormConfig
	bin      string
	binErr   error
	lockPath string
	log      *slog.Logger

	mu     sync.Mutex
	state  StormState
	result []byte
	// stop ends the running storm; done is closed when it has ended.
	stop   context.CancelFunc
	done   chan struct{}
	closed bool
}

// close stops a running storm (SIGINT to its group: it removes its
// namespaces) and waits for it to end; no storm starts after it.
func (r *stormRunner) close() {
	r.mu.Lock()
	r.closed = true
	stop, done := r.stop, r.done
	r.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func newStormRunner(cfg StormConfig, log *slog.Logger) *stormRunner {
	if cfg.PerHour <= 0 {
		cfg.PerHour = DefaultPerHour
	}
	if cfg.Phase <= 0 {
		cfg.Phase = DefaultStormPhase
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultStormTimeout
	}
	if cfg.LockPath == "" {
		cfg.LockPath = flock.StormLockPath()
	}
	r := &stormRunner{cfg: cfg, lockPath: cfg.LockPath, log: log, state: StormState{Phases: []string{}}}
	r.bin, r.binErr = FindLab(cfg.Binary)
	return r
}

func (r *stormRunner) snapshot() *StormState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state
	st.Phases = append([]string{}, st.Phases...)
	if st.Now != nil {
		now := *st.Now
		st.Now = &now
	}
	return &st
}

// start runs one storm; it fails at once when one runs (here or in
// another process: the storm lock) or the lab binary is missing.
func (r *stormRunner) start(scenario string, contrast bool) error {
	if r.binErr != nil {
		return r.binErr
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("%w: the service is stopping", errUnavailable)
	}
	if r.state.Running {
		return errBusy
	}
	// The storm takes the lock itself (parts.LockStorms) and would wait
	// for it: only see that it is free now. A done context makes Take try
	// once.
	once, cancel := context.WithCancel(context.Background())
	cancel()
	_, release, err := flock.Take(once, []string{r.lockPath}, 0o600, nil)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errBusy
		}
		return err
	}
	release()
	out, err := os.CreateTemp("", "xdpshield-workbench-*.json")
	if err != nil {
		return err
	}
	out.Close()
	args := []string{"storm", "-short", "-sources", scenario, "-duration", r.cfg.Phase.String(),
		"-contrast=" + strconv.FormatBool(contrast), "-progress-json", "-json", out.Name()}
	ctx, stop := context.WithTimeout(context.Background(), r.cfg.Timeout)
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// SIGINT to the group: the storm removes its namespaces on it.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	grace := killGrace
	cmd.WaitDelay = grace + 5*time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stop()
		return err
	}
	var stderr tail
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		stop()
		os.Remove(out.Name())
		return fmt.Errorf("start %s: %w", r.bin, err)
	}
	r.stop, r.done = stop, make(chan struct{})
	ended := r.done
	r.state = StormState{Running: true, Scenario: scenario, Contrast: contrast, Started: time.Now().UnixMilli(), Phases: []string{}}
	r.result = nil
	r.log.Info("workbench storm started", "scenario", scenario, "contrast", contrast, "pid", cmd.Process.Pid)
	pid := cmd.Process.Pid
	go func() {
		// What SIGINT leaves running after killGrace is killed, the
		// whole group (a child holding stdout would hold Wait).
		<-ctx.Done()
		select {
		case <-ended:
		case <-time.After(grace):
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}()
	go func() {
		defer close(ended)
		defer stop()
		defer os.Remove(out.Name())
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var p StormProgress
			if json.Unmarshal(sc.Bytes(), &p) != nil || p.Phase == "" {
				continue
			}
			r.mu.Lock()
			if n := len(r.state.Phases); n == 0 || r.state.Phases[n-1] != p.Phase {
				r.state.Phases = append(r.state.Phases, p.Phase)
			}
			r.state.Now = &p
			r.mu.Unlock()
		}
		werr := cmd.Wait()
		res, _ := os.ReadFile(out.Name())
		var sum struct {
			OK     bool     `json:"ok"`
			Failed []string `json:"failed"`
			Error  string   `json:"error"`
		}
		parsed := len(res) > 0 && json.Unmarshal(res, &sum) == nil
		r.mu.Lock()
		defer r.mu.Unlock()
		r.state.Running, r.state.Done, r.state.Ended = false, true, time.Now().UnixMilli()
		if parsed {
			r.result = res
			r.state.HasResult = true
			r.state.OK, r.state.Failed, r.state.Error = sum.OK, sum.Failed, sum.Error
		}
		if werr != nil && r.state.Error == "" && len(r.state.Failed) == 0 {
			r.state.Error = strings.TrimSpace(werr.Error() + ": " + stderr.String())
		}
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			r.state.Error = fmt.Sprintf("stopped after %s (workbench storm timeout)", r.cfg.Timeout)
		case ctx.Err() != nil:
			r.state.Error = "stopped: the service is stopping"
		}
		r.log.Info("workbench storm ended", "ok", r.state.OK, "err", r.state.Error)
	}()
	return nil
}

// tail keeps the last 2 KiB written to it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
