package sim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Target is what a scenario runs against: any XDP program, and optionally
// its virtual clock and its counters.
type Target struct {
	Prog *ebpf.Program
	// SetTime sets the program's virtual clock; nil when it has none, and
	// then steps must leave At zero.
	SetTime func(ns uint64) error
	// Counters reads the program's counters by name; nil when it has none,
	// and then steps must leave Delta nil.
	Counters func() (map[string]uint64, error)
}

// Step is one frame sent at one virtual time.
type Step struct {
	Name  string
	At    time.Duration // virtual time the clock is set to before the frame runs
	Frame []byte
	Times int    // how many times the frame is sent (0 means once), each expecting Want
	Want  Action // expected action of every send
	// Delta is the exact change of the counters the step (all its sends)
	// must cause: a counter not named must not move. nil skips the check.
	Delta map[string]uint64
}

// Scenario is a table of steps run in order against one target.
type Scenario struct {
	Name    string
	Target  Target
	Steps   []Step
	PcapDir string // where a failure's pcap goes; default $SIM_PCAP_DIR or $TMPDIR/xdpshield-sim
}

// Sent is one frame the scenario ran and what came of it.
type Sent struct {
	Step  int
	At    time.Duration
	Frame []byte
	Got   Action
}

// Result reports a scenario's run.
type Result struct {
	Steps    int    // steps completed, failed one included
	Sent     []Sent // every frame run, in order
	Failures []string
	Pcap     string // the failure pcap, when one was written
}

// Exec runs the scenario and reports what happened. It stops at the first
// failing step (later steps depend on the state it left). An error means the
// scenario could not run; failed expectations are in Result.Failures.
func (sc Scenario) Exec() (Result, error) {
	var res Result
	if len(sc.Steps) == 0 {
		return res, fmt.Errorf("scenario %q has no steps", sc.Name)
	}
	if sc.Target.Prog == nil {
		return res, fmt.Errorf("scenario %q has no program", sc.Name)
	}
	// last holds the counters read after the previous step: nothing else
	// runs the program between two steps, so it is the next step's before.
	var last map[string]uint64
	for i, st := range sc.Steps {
		label := fmt.Sprintf("step %d (%s)", i, st.Name)
		if st.At != 0 || sc.Target.SetTime != nil {
			if sc.Target.SetTime == nil {
				return res, fmt.Errorf("%s: sets time %s but the target has no virtual clock", label, st.At)
			}
			if err := sc.Target.SetTime(uint64(st.At)); err != nil {
				return res, fmt.Errorf("%s: set time: %w", label, err)
			}
		}
		before := last
		last = nil
		if st.Delta != nil && before == nil {
			if sc.Target.Counters == nil {
				return res, fmt.Errorf("%s: expects counter deltas but the target has no counters", label)
			}
			var err error
			if before, err = sc.Target.Counters(); err != nil {
				return res, fmt.Errorf("%s: read counters: %w", label, err)
			}
		}
		times := max(st.Times, 1)
		for n := range times {
			got, err := Run(sc.Target.Prog, st.Frame)
			if err != nil {
				return res, fmt.Errorf("%s: %w", label, err)
			}
			res.Sent = append(res.Sent, Sent{Step: i, At: st.At, Frame: st.Frame, Got: got})
			if got != st.Want {
				res.Failures = append(res.Failures, fmt.Sprintf("%s, send %d of %d: Run() = %s, want %s", label, n+1, times, got, st.Want))
				break
			}
		}
		if st.Delta != nil {
			after, err := sc.Target.Counters()
			if err != nil {
				return res, fmt.Errorf("%s: read counters: %w", label, err)
			}
			if d := DiffCounts(st.Delta, Delta(before, after)); d != "" {
				res.Failures = append(res.Failures, fmt.Sprintf("%s: counter deltas differ (-want +got):\n%s", label, d))
			}
			last = after
		}
		res.Steps++
		if len(res.Failures) > 0 {
			break
		}
	}
	if len(res.Failures) > 0 {
		path, err := sc.writePcap(res.Sent)
		if err != nil {
			return res, err
		}
		res.Pcap = path
	}
	return res, nil
}

// TB is the part of testing.TB that Run uses: sim is linked by the lab's
// binary too, which must not link package testing.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// Run runs the scenario as part of test t (a *testing.T), failing t on any
// failed expectation, on an error, and when no step ran.
func (sc Scenario) Run(t TB) Result {
	t.Helper()
	res, err := sc.Exec()
	if err != nil {
		t.Fatalf("scenario %q: %v", sc.Name, err)
	}
	if res.Steps == 0 {
		t.Fatalf("scenario %q: zero steps ran", sc.Name)
	}
	for _, f := range res.Failures {
		t.Errorf("scenario %q: %s", sc.Name, f)
	}
	if res.Pcap != "" {
		t.Logf("scenario %q: the %d frames it ran are in %s (tcpdump -enr %[3]s)", sc.Name, len(res.Sent), res.Pcap)
	}
	return res
}

func (sc Scenario) writePcap(sent []Sent) (string, error) {
	dir := sc.PcapDir
	if dir == "" {
		dir = os.Getenv("SIM_PCAP_DIR")
	}
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "xdpshield-sim")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("failure pcap: %w", err)
	}
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, sc.Name)
	if name == "" {
		name = "scenario"
	}
	path := filepath.Join(dir, name+".pcap")
	frames := make([]Packet, len(sent))
	for i, s := range sent {
		frames[i] = Packet{At: s.At, Data: s.Frame}
	}
	if err := WritePcap(path, frames); err != nil {
		return "", fmt.Errorf("failure pcap: %w", err)
	}
	return path, nil
}

// Packet is one frame of a pcap and its capture time.
type Packet struct {
	At   time.Duration // since the Unix epoch; the simulator's virtual time
	Data []byte
}

// WritePcap writes frames to a classic pcap file (Ethernet link type).
func WritePcap(path string, frames []Packet) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := pcapgo.NewWriterNanos(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		f.Close()
		return err
	}
	for _, p := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, int64(p.At)), CaptureLength: len(p.Data), Length: len(p.Data)}
		if err := w.WritePacket(ci, p.Data); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return f.Close()
}

// ReadPcap reads every frame of a pcap file.
func ReadPcap(path string) ([]Packet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []Packet
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("read %s: %w", path, err)
		}
		out = append(out, Packet{At: time.Duration(ci.Timestamp.UnixNano()), Data: data})
	}
}

// Delta returns after - before for every counter that moved.
func Delta(before, after map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// DiffCounts describes how got differs from want ("" when equal), one line
// per counter: "-key want" and "+key got". Zero entries count as absent.
func DiffCounts(want, got map[string]uint64) string {
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	sorted := slices.Sorted(func(yield func(string) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	for _, k := range sorted {
		if want[k] == got[k] {
			continue
		}
		if want[k] != 0 {
			fmt.Fprintf(&b, "-%s %d\n", k, want[k])
		}
		if got[k] != 0 {
			fmt.Fprintf(&b, "+%s %d\n", k, got[k])
		}
	}
	return b.String()
}
