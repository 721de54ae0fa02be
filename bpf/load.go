package bpf

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cilium/ebpf"
)

// Load loads spec into objs as LoadAndAssign does, after setting vars (the
// program's `const volatile` load-time switches, by name) on a copy of spec,
// so a caller may load the same spec again with other values. The error of
// a refused load carries the verifier's whole log (%+v) and still matches
// *ebpf.VerifierError with errors.As, for a caller that falls back to
// another variant.
func Load(spec *ebpf.CollectionSpec, vars map[string]any, objs any, opts *ebpf.CollectionOptions) error {
	spec = spec.Copy()
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		v, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("set %s: no such variable", name)
		}
		if err := v.Set(vars[name]); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	err := spec.LoadAndAssign(objs, opts)
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return verifierError{ve}
	}
	return err
}

// verifierError prints the verifier's whole log, not only its last line.
type verifierError struct{ ve *ebpf.VerifierError }

func (e verifierError) Error() string { return fmt.Sprintf("%+v", e.ve) }
func (e verifierError) Unwrap() error { return e.ve }
