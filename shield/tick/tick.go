package tick

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdpshield/xdpshield/bpf"
)

// jiffy is the measurement, made once.
var jiffy struct {
	once sync.Once
	ns   uint64
	err  error
}

// Jiffy measures 1e9/CONFIG_HZ by reading jiffies and ktime twice,
// 100 ms apart, through clock_probe; the result is snapped to the HZ values
// Linux offers and cached for the process.
func Jiffy() (uint64, error) {
	jiffy.once.Do(func() { jiffy.ns, jiffy.err = measureJiffy() })
	return jiffy.ns, jiffy.err
}

func measureJiffy() (uint64, error) {
	spec, err := bpf.LoadShield()
	if err != nil {
		return 0, fmt.Errorf("load spec: %w", err)
	}
	// The probe alone (shield needs BPF_CMPXCHG) and the generated global
	// data. The tag spells bpf.ShieldProgClockProbe (a tag cannot name a
	// constant); bpf.Load refuses a name the object lacks.
	var objs struct {
		Probe *ebpf.Program `ebpf:"clock_probe"`
		bpf.ShieldVariables
	}
	if err := bpf.Load(spec, nil, &objs, nil); err != nil {
		return 0, fmt.Errorf("load clock probe: %w", err)
	}
	defer objs.Probe.Close()

	read := func() (j, k uint64, err error) {
		if _, err := objs.Probe.Run(&ebpf.RunOptions{Data: make([]byte, 64)}); err != nil {
			return 0, 0, fmt.Errorf("run clock probe: %w", err)
		}
		if err := objs.ProbeJiffies.Get(&j); err != nil {
			return 0, 0, fmt.Errorf("read probe_jiffies: %w", err)
		}
		// k is read before it is returned: in `return j, k, Get(&k)` the
		// order of k and the call is unspecified.
		if err := objs.ProbeKtimeNs.Get(&k); err != nil {
			return 0, 0, fmt.Errorf("read probe_ktime_ns: %w", err)
		}
		return j, k, nil
	}
	// A jiffy count can lag the clock it is compared with (a tick
	// delayed on a busy or emulated CPU: a starved TCG guest measured
	// 18.9 Hz over 100 ms), so a measurement that matches no known HZ is
	// taken again over a longer interval, up to five times.
	var seen []string
	for try := 1; try <= 5; try++ {
		j0, k0, err := read()
		if err != nil {
			return 0, err
		}
		time.Sleep(time.Duration(try) * 100 * time.Millisecond)
		j1, k1, err := read()
		if err != nil {
			return 0, err
		}
		hz := float64(j1-j0) * 1e9 / float64(k1-k0)
		best, bestErr := 0, math.Inf(1)
		for _, cand := range []int{100, 250, 300, 1000} {
			if e := math.Abs(hz-float64(cand)) / float64(cand); e < bestErr {
				best, bestErr = cand, e
			}
		}
		if bestErr <= 0.15 {
			return uint64(1e9 / best), nil
		}
		seen = append(seen, fmt.Sprintf("%.1f", hz))
	}
	return 0, fmt.Errorf("measure CONFIG_HZ: %s Hz over five intervals match no known value", strings.Join(seen, ", "))
}
