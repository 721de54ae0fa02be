package shield

import (
	"crypto/sha256"
	"fmt"
	"reflect"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpshield/xdpshield/shield/lists"
)

// SetAfterFilterWalk makes RefreshFilter call f between its walk of the
// table and its swap (tests of package shield_test).
func SetAfterFilterWalk(s *Shield, f func()) { s.afterFilterWalk = f }

// DumpState writes down what a reader of s's maps, variables and Go state
// can see, one entry per map key (zero array values left out), for
// comparing two states (TestResetIsLoad): what Reset does not restore
// (see Reset) is left out.
func DumpState(s *Shield) (map[string]string, error) {
	out := map[string]string{}
	maps := reflect.ValueOf(&s.objs.ShieldMaps).Elem()
	for i := range maps.NumField() {
		m := maps.Field(i).Interface().(*ebpf.Map)
		name := maps.Type().Field(i).Name
		switch m {
		case s.objs.RuleCounts, s.objs.Captured, s.objs.ConfigMap:
			continue
		}
		if m.Type() == ebpf.ProgramArray {
			for k := range m.MaxEntries() {
				var id ebpf.ProgramID
				if err := m.Lookup(k, &id); err == nil {
					out[fmt.Sprintf("%s[%d]", name, k)] = "a program"
				}
			}
			continue
		}
		if m.Type() == ebpf.Array && m.Flags()&unix.BPF_F_MMAPABLE != 0 {
			// The sources table and the presence filter: MiBs, read
			// through a mapping.
			elem := int((m.ValueSize() + 7) &^ 7)
			b, err := unix.Mmap(m.FD(), 0, int(m.MaxEntries())*elem, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			for i := 0; i < len(b); i += elem {
				if e := b[i : i+elem]; slices.ContainsFunc(e, func(c byte) bool { return c != 0 }) {
					out[fmt.Sprintf("%s[%d]", name, i/elem)] = fmt.Sprintf("%x", e)
				}
			}
			unix.Munmap(b)
			continue
		}
		var k []byte
		it := m.Iterate()
		if m.Type() == ebpf.PerCPUArray { // the counters: __u64 per CPU
			var v []uint64
			for it.Next(&k, &v) {
				if slices.ContainsFunc(v, func(x uint64) bool { return x != 0 }) {
					out[fmt.Sprintf("%s[%x]", name, k)] = fmt.Sprint(v)
				}
			}
		} else {
			var v []byte
			for it.Next(&k, &v) {
				if slices.ContainsFunc(v, func(x byte) bool { return x != 0 }) {
					out[fmt.Sprintf("%s[%x]", name, k)] = fmt.Sprintf("%x", v)
				}
			}
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	cfg, _, err := s.readConfig()
	if err != nil {
		return nil, err
	}
	cfg.FilterSeed = 0 // the hash keys' seed: Load's own, kept
	// The whole configuration as a digest (its port and region bitmaps
	// are KiBs), beside the fields a reader looks for first.
	out["config"] = fmt.Sprintf("flags %#x eph %d-%d own %d+%d filter %d sha256 %x", cfg.Flags, cfg.EphLo, cfg.EphHi,
		cfg.Own4N, cfg.Own6N, cfg.Filter, sha256.Sum256(fmt.Appendf(nil, "%+v", cfg)))
	vars := reflect.ValueOf(&s.objs.ShieldVariables).Elem()
	for i := range vars.NumField() {
		v := vars.Field(i).Interface().(*ebpf.Variable)
		if v.ReadOnly() {
			continue
		}
		b := make([]byte, v.Size())
		if err := v.Get(b); err != nil {
			return nil, err
		}
		out["var "+vars.Type().Field(i).Name] = fmt.Sprintf("%x", b)
	}
	allow, deny := s.snap[lists.AllowList].Load(), s.snap[lists.DenyList].Load()
	out["go"] = fmt.Sprintf("limits %+v eph %v gen %d filter %d allow %v deny %v rules %v note %q",
		s.limits, s.eph, s.gen, s.filter, *allow, *deny, *s.rules.Load(), s.clockNote)
	return out, nil
}
