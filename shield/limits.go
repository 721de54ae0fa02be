package shield

import (
	"errors"
	"fmt"

	"xdpshield/bpf"
)

// token is the credit one packet costs; it mirrors TOKEN in bpf/shield.c.
const token = 1_000_000_000

// maxRate and maxBurst bound limits so that credit arithmetic in the program
// (burst * token, elapsed * rate) cannot overflow a signed 64-bit value.
const (
	maxRate  = 1_000_000_000
	maxBurst = 1_000_000_000
)

// Limits is the shield's rate configuration; it changes without a reload.
type Limits struct {
	Rate           uint64 `json:"rate"`            // packets per second per source
	Burst          uint64 `json:"burst"`           // packets a source may send at once
	AdmissionRate  uint64 `json:"admission_rate"`  // new sources admitted per second, all CPUs together
	AdmissionBurst uint64 `json:"admission_burst"` // new sources admitted at once
	DryRun         bool   `json:"dry_run"`         // count would-be limit/admission drops, pass them
}

// DefaultLimits are generous for a human-driven client and tight for a flood:
// 1000 packets/s per source with a burst of 2000, and 10,000 new sources/s.
func DefaultLimits() Limits {
	return Limits{Rate: 1000, Burst: 2000, AdmissionRate: 10000, AdmissionBurst: 10000}
}

// Validate reports every problem of l at once.
func (l Limits) Validate() error {
	var errs []error
	check := func(name string, v, max uint64) {
		if v == 0 || v > max {
			errs = append(errs, fmt.Errorf("%s %d out of range [1, %d]", name, v, max))
		}
	}
	check("rate", l.Rate, maxRate)
	check("burst", l.Burst, maxBurst)
	check("admission_rate", l.AdmissionRate, maxRate)
	check("admission_burst", l.AdmissionBurst, maxBurst)
	return errors.Join(errs...)
}

func bucketLimit(rate, burst uint64) bpf.ShieldLimit {
	c := burst * token
	return bpf.ShieldLimit{Rate: rate, Cap: c, FillNs: (c + rate - 1) / rate}
}

// config flags, mirroring CONFIG_* in bpf/shield.c.
const (
	flagDryRun uint32 = 1 << iota
	flagAllow4
	flagAllow6
	flagDeny4
	flagDeny6
)

func (l Limits) config(lists uint32) bpf.ShieldConfig {
	cfg := bpf.ShieldConfig{
		Source:    bucketLimit(l.Rate, l.Burst),
		Admission: bucketLimit(l.AdmissionRate, l.AdmissionBurst),
		Flags:     lists,
	}
	if l.DryRun {
		cfg.Flags |= flagDryRun
	}
	return cfg
}

func limitsOf(cfg bpf.ShieldConfig) Limits {
	return Limits{
		Rate:           cfg.Source.Rate,
		Burst:          cfg.Source.Cap / token,
		AdmissionRate:  cfg.Admission.Rate,
		AdmissionBurst: cfg.Admission.Cap / token,
		DryRun:         cfg.Flags&flagDryRun != 0,
	}
}
