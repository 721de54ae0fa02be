package gate

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/xdpshield/xdpshield/bpf"
)

// statsRE is the verifier's stats line, printed since 4.x at log level 4
// (BPF_LOG_STATS): "processed 1234 insns (limit 1000000) max_states_per_insn ...".
var statsRE = regexp.MustCompile(`processed (\d+) insns \(limit \d+\)`)

// ParseProcessed returns the instructions processed that a verifier log's
// stats line reports.
func ParseProcessed(log string) (uint32, bool) {
	m := statsRE.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(m[len(m)-1][1], 10, 32)
	return uint32(n), err == nil
}

// Objects are the program families of bpf/ whose complexity the gate
// tracks: the shield's programs under their own names, every other
// object's as object/program. Every object the tool loads is here;
// walk.c is not: the table walks BenchmarkTop compares the service's
// with, never loaded by the tool.
var Objects = []struct {
	Prefix string
	Load   func() (*ebpf.CollectionSpec, error)
}{
	{"", bpf.LoadShield},
	{"l7/", bpf.LoadL7},
	{"lb/", bpf.LoadLb},
	{"probe/", bpf.LoadProbe},
	{"storm/", bpf.LoadStorm},
	{"xdplb/", bpf.LoadXdplb},
}

// Complexity loads every program of every object in Objects on its own
// (so one refused program does not hide the others), with its load-time
// switches at their defaults, and reads the verifier's figures.
func Complexity() (map[string]Program, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}
	out := map[string]Program{}
	for _, o := range Objects {
		spec, err := o.Load()
		if err != nil {
			return nil, fmt.Errorf("load spec %s: %w", o.Prefix, err)
		}
		for _, name := range slices.Sorted(maps.Keys(spec.Programs)) {
			out[o.Prefix+name] = complexity(spec, name)
		}
	}
	return out, nil
}

func complexity(spec *ebpf.CollectionSpec, name string) Program {
	one := spec.Copy()
	for n := range one.Programs {
		if n != name {
			delete(one.Programs, n)
		}
	}
	p := Program{SpecInsns: len(one.Programs[name].Instructions)}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
	})
	if err != nil {
		p.Error = lastLines(err, 3)
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			if n, ok := ParseProcessed(strings.Join(ve.Log, "\n")); ok {
				p.InsnsProcessed, p.InsnsSource = n, "log"
			}
		}
		return p
	}
	defer coll.Close()
	prog := coll.Programs[name]
	p.Loaded = true
	info, err := prog.Info()
	if err != nil {
		p.Error = fmt.Sprintf("program info: %v", err)
		return p
	}
	if n, ok := info.VerifiedInstructions(); ok && n > 0 {
		p.InsnsProcessed, p.InsnsSource = n, "info"
	} else if n, ok := ParseProcessed(prog.VerifierLog); ok {
		p.InsnsProcessed, p.InsnsSource = n, "log"
	} else {
		p.Error = "no instruction count: neither the info field (5.16+) nor a stats line in the log"
	}
	if size, err := info.TranslatedSize(); err == nil {
		p.XlatedInsns = size / 8
	} else if p.Error == "" {
		p.Error = fmt.Sprintf("translated size: %v", err)
	}
	return p
}

// lastLines keeps the end of a (verifier) error, where it says why: its
// last n lines before the statistics the log ends with.
func lastLines(err error, n int) string {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && len(ve.Log) > 0 {
		l := ve.Log
		for len(l) > 1 {
			last := l[len(l)-1]
			if !strings.HasPrefix(last, "verification time") && !strings.HasPrefix(last, "stack depth") &&
				!strings.HasPrefix(last, "processed ") && strings.TrimSpace(last) != "" {
				break
			}
			l = l[:len(l)-1]
		}
		if len(l) > n {
			l = l[len(l)-n:]
		}
		return strings.Join(l, " | ")
	}
	return err.Error()
}
