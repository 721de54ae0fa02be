package gate

import (
	"encoding/json"
	"fmt"
	"strings"

	"xdpshield/internal/kernel"
	"xdpshield/internal/testutil"
)

// Marker starts the line a measurement run prints its figures on, so the
// gate finds them in a VM's output.
const Marker = "@@GATE-FIGURES "

// Collect measures complexity and speed in the running kernel; behaviour
// comes from the test runs beside it. Failures are kept in Errors.
func Collect(name string, o SpeedOptions) Figures {
	f := Figures{Kernel: name, Release: kernel.Release(), Emulated: testutil.Emulated()}
	var err error
	if f.Programs, err = Complexity(); err != nil {
		f.Errors = append(f.Errors, fmt.Sprintf("complexity: %v", err))
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
