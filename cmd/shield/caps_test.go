package main

import (
	"slices"
	"testing"
)

func TestMissingCaps(t *testing.T) {
	bit := func(cs ...int) uint64 {
		var v uint64
		for _, c := range cs {
			v |= 1 << c
		}
		return v
	}
	for _, tc := range []struct {
		name     string
		eff      uint64
		adopting bool
		want     []string
	}{
		{"sys_admin alone", bit(capSysAdmin), false, nil},
		{"sys_admin alone, adopting", bit(capSysAdmin), true, nil},
		{"modern set", bit(capBPF, capNetAdmin, capPerfmon), false, nil},
		{"modern set, adopting", bit(capBPF, capNetAdmin, capPerfmon), true, []string{"CAP_SYS_ADMIN"}},
		{"none", 0, false, []string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"}},
		{"no bpf", bit(capNetAdmin, capPerfmon), false, []string{"CAP_BPF"}},
		{"no net_admin", bit(capBPF, capPerfmon), false, []string{"CAP_NET_ADMIN"}},
		{"no perfmon", bit(capBPF, capNetAdmin), false, []string{"CAP_PERFMON"}},
		{"net_admin alone", bit(capNetAdmin), false, []string{"CAP_BPF", "CAP_PERFMON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := missingCaps(tc.eff, tc.adopting); !slices.Equal(got, tc.want) {
				t.Errorf("missingCaps(%#x, %v) = %v, want %v", tc.eff, tc.adopting, got, tc.want)
			}
		})
	}
}
