package gate

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/kernel"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

// SpeedBaseEnv names the base revision's shield object (shield_bpfel.o)
// for the measurement run on the host: its paths are timed against it.
const SpeedBaseEnv = "GATE_SPEED_BASE"

// Marker starts the line a measurement run prints its figures on, so the
// gate finds them in a VM's output.
const Marker = "@@GATE-FIGURES "

// Collect measures complexity (and, on the host, speed) in the running
// kernel; behaviour
// comes from the test runs beside it. Failures are kept in Errors.
func Collect(name string, o SpeedOptions) Figures {
	f := Figures{Kernel: name, Release: kernel.Release(), Emulated: testutil.Emulated(), Features: features.Present()}
	var err error
	if f.Programs, err = Complexity(); err != nil {
		f.Errors = append(f.Errors, fmt.Sprintf("complexity: %v", err))
	}
	// Speed only on the host: under TCG a path's ratio to the reference
	// moved by up to 58% between two clean boots of the same program (7.2:
	// admission-drop 2.72 -> 4.31), so nothing below that could be judged.
	if testutil.InVM() {
		return f
	}
	if o.Base != nil {
		cur, err := bpf.LoadShield()
		if err == nil {
			err = SameLayout(o.Base, cur)
		}
		if err != nil {
			f.Notes = append(f.Notes, fmt.Sprintf("speed: the base revision's program was not timed beside this one (%v); the paths are compared with the baseline's ratios to XDP_DROP", err))
			o.Base = nil
		}
	}
	if f.Speed, err = Speed(o); err != nil {
		f.Errors = append(f.Errors, fmt.Sprintf("speed: %v", err))
	}
	return f
}

// Emit is the line carrying f in a test binary's output.
func Emit(f Figures) (string, error) {
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	return Marker + string(b), nil
}

// Parse finds the figures a measurement run printed.
func Parse(lines []string) (Figures, error) {
	for _, l := range lines {
		if _, js, ok := strings.Cut(l, Marker); ok {
			var f Figures
			if err := json.Unmarshal([]byte(js), &f); err != nil {
				return f, fmt.Errorf("parse gate figures: %w", err)
			}
			return f, nil
		}
	}
	return Figures{}, fmt.Errorf("no %q line in the measurement run's output", strings.TrimSpace(Marker))
}
