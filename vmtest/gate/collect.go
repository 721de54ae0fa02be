package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/internal/features"
	"github.com/xdpshield/xdpshield/internal/kernel"
	"github.com/xdpshield/xdpshield/internal/testutil"
)

// SpeedBaseEnv names a directory holding the base revision's objects
// (SpeedObjects, under their names in bpf/) for the measurement run on the
// host: each object's paths are timed against its base.
const SpeedBaseEnv = "GATE_SPEED_BASE"

// SpeedObjects are the objects whose paths the gate times against a base
// revision's: by name (speedPath.object), file in bpf/, and this tree's.
var SpeedObjects = []struct {
	Name, File string
	Load       func() (*ebpf.CollectionSpec, error)
}{
	{"shield", "shield_bpfel.o", bpf.LoadShield},
	{"xdplb", "xdplb_bpfel.o", bpf.LoadXdplb},
}

// SpeedBases reads the base revision's objects from dir. An object whose
// file is not there (a base revision from before the object) has no base:
// NoBase says so, and its paths are compared with the baseline's ratios.
func SpeedBases(dir string) (map[string]*ebpf.CollectionSpec, map[string]string, error) {
	base, none := map[string]*ebpf.CollectionSpec{}, map[string]string{}
	for _, o := range SpeedObjects {
		p := filepath.Join(dir, o.File)
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			none[o.Name] = fmt.Sprintf("no base: the base revision has no bpf/%s", o.File)
			continue
		}
		spec, err := ebpf.LoadCollectionSpec(p)
		if err != nil {
			return nil, nil, fmt.Errorf("the base object %s: %w", p, err)
		}
		base[o.Name] = spec
	}
	return base, none, nil
}

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
	base, none := map[string]*ebpf.CollectionSpec{}, maps.Clone(o.NoBase)
	if none == nil {
		none = map[string]string{}
	}
	for _, obj := range SpeedObjects {
		spec := o.Base[obj.Name]
		if spec == nil {
			continue
		}
		cur, err := obj.Load()
		if err == nil {
			err = SameLayout(spec, cur)
		}
		if err != nil {
			none[obj.Name] = fmt.Sprintf("no base: %v", err)
			continue
		}
		base[obj.Name] = spec
	}
	for _, obj := range SpeedObjects {
		if why, ok := none[obj.Name]; ok {
			f.Notes = append(f.Notes, fmt.Sprintf("speed: the base revision's %s program was not timed beside this one (%s); its paths are compared with the baseline's ratios to XDP_DROP", obj.Name, why))
		}
	}
	o.Base, o.NoBase = base, none
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
