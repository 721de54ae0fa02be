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
		name string
		eff  uint64
		want []string
	}{
		{"sys_admin alone", bit(capSysAdmin), nil},
		{"modern set", bit(capBPF, capNetAdmin, capPerfmon), nil},
		{"none", 0, []string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"}},
		{"no bpf", bit(capNetAdmin, capPerfmon), []string{"CAP_BPF"}},
		{"no net_admin", bit(capBPF, capPerfmon), []string{"CAP_NET_ADMIN"}},
		{"no perfmon", bit(capBPF, capNetAdmin), []string{"CAP_PERFMON"}},
		{"net_admin alone", bit(capNetAdmin), []string{"CAP_BPF", "CAP_PERFMON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := missingCaps(tc.eff); !slices.Equal(got, tc.want) {
				t.Errorf("missingCaps(%#x) = %v, want %v", tc.eff, got, tc.want)
			}
		})
	}
}
