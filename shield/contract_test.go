package shield

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
)

// enumerators reads enum name's enumerators from the BTF of the committed
// object, the one the loader loads.
func enumerators(t *testing.T, spec *ebpf.CollectionSpec, name string) map[string]uint64 {
	t.Helper()
	var e *btf.Enum
	err := spec.Types.TypeByName(name, &e)
	require.NoError(t, err, "Types.TypeByName(%q) = %v, want the enum (bpf/shield.c, struct contract)", name, err)
	out := map[string]uint64{}
	for _, v := range e.Values {
		out[v.Name] = v.Value
	}
	require.NotEmpty(t, out, "enum %s has no enumerators", name)
	return out
}

// TestContract checks the Go side of the program's numbers against the
// object's BTF, unprivileged: every enumerator of the counters' enums and
// of the clock has the Go name its C name says (REASON_NOT_IP is "not_ip"
// in the metrics and the simulator), every Go value is one of them, and
// the flags, list verdicts, classes and limits Go writes are the
// program's. The Go constants come from the bpf2go output: this catches
// that output edited or stale, and a C enumerator added without a name.
func TestContract(t *testing.T) {
	spec, err := bpf.LoadShield()
	require.NoError(t, err, "LoadShield()")

	// named checks an enum whose Go type names its values: enumerator
	// PREFIX_X of value v is String() "x" in Go, the one MAX enumerator is
	// how many there are, and the Go list holds exactly the other values.
	named := func(t *testing.T, enum, prefix string, str func(uint64) string, list []uint64, max bool) {
		t.Helper()
		vals := enumerators(t, spec, enum)
		var want []uint64
		for name, v := range vals {
			if max && name == prefix+"MAX" {
				continue
			}
			want = append(want, v)
			got, w := str(v), strings.ToLower(strings.TrimPrefix(name, prefix))
			assert.EqualValues(t, w, got, "%s: value %d (%s in C) is %q in Go, want %q", enum, v, name, got, w)
		}
		slices.Sort(want)
		if max {
			got, ok := vals[prefix+"MAX"]
			assert.False(t, !ok || got != uint64(len(want)), "%s: %sMAX = %d (present %v), want %d, the count of the others", enum, prefix, got, ok, len(want))
		}
		assert.True(t, slices.Equal(list, want), "%s: Go's values = %v, want %v (the C enumerators)", enum, list, want)
	}
	t.Run("reason", func(t *testing.T) {
		named(t, "reason", "REASON_", func(v uint64) string { return counter.Reason(v).String() }, asU64(counter.Reasons()), true)
	})
	t.Run("proto", func(t *testing.T) {
		named(t, "proto", "PROTO_", func(v uint64) string { return counter.Proto(v).String() }, asU64(counter.Protos()), true)
	})
	t.Run("verdict", func(t *testing.T) {
		named(t, "verdict", "VERDICT_", func(v uint64) string { return counter.Verdict(v).String() }, asU64(counter.Verdicts()), true)
	})
	t.Run("clock", func(t *testing.T) {
		var valid []uint64
		for c := range 256 {
			if config.Clock(c).Valid() {
				valid = append(valid, uint64(c))
			}
		}
		named(t, "clock", "CLOCK_", func(v uint64) string { return config.Clock(v).String() }, valid, false)
		assert.EqualValues(t, 0, config.ClockJiffies, "ClockJiffies = %d, want 0: Options' zero value is the jiffies clock", config.ClockJiffies)
	})

	// valued checks constants Go writes into the program's maps against
	// the enumerators of the same name.
	valued := func(t *testing.T, enum string, want map[string]uint64) {
		t.Helper()
		vals := enumerators(t, spec, enum)
		for name, got := range want {
			v, ok := vals[name]
			assert.False(t, !ok || v != got, "%s: Go writes %d for %s, C has %d (present %v)", enum, got, name, v, ok)
		}
		for name := range vals {
			_, ok := want[name]
			assert.True(t, ok, "%s: %s has no Go counterpart in this test", enum, name)
		}
	}
	t.Run("config_flag", func(t *testing.T) {
		valued(t, "config_flag", map[string]uint64{
			"CONFIG_DRY_RUN": uint64(config.FlagDryRun), "CONFIG_ALLOW4": uint64(config.FlagAllow4), "CONFIG_ALLOW6": uint64(config.FlagAllow6),
			"CONFIG_DENY4": uint64(config.FlagDeny4), "CONFIG_DENY6": uint64(config.FlagDeny6), "CONFIG_OWN4": uint64(config.FlagOwn4),
			"CONFIG_OWN6": uint64(config.FlagOwn6), "CONFIG_PROTECT": uint64(config.FlagProtect), "CONFIG_PROTECT_ICMP": uint64(config.FlagProtectICMP),
			"CONFIG_PROTECT_ADDR": uint64(config.FlagProtectAddr), "CONFIG_LISTS_B": uint64(config.FlagListsB), "CONFIG_AGGREGATE": uint64(config.FlagAggregate), "CONFIG_CLOCK_SHIFT": uint64(config.ClockShift),
		})
		for _, f := range []uint32{config.FlagDryRun, config.FlagAllow4, config.FlagAllow6, config.FlagDeny4, config.FlagDeny6, config.FlagOwn4, config.FlagOwn6, config.FlagProtect, config.FlagProtectICMP, config.FlagProtectAddr, config.FlagListsB, config.FlagAggregate} {
			assert.EqualValues(t, 0, f>>config.ClockShift, "flag %#x lies in the clock's byte (from bit %d)", f, config.ClockShift)
		}
	})
	t.Run("list_verdict", func(t *testing.T) {
		valued(t, "list_verdict", map[string]uint64{
			"LIST_ALLOW": uint64(lists.VerdictAllow), "LIST_DENY": uint64(lists.VerdictDeny), "LIST_OWN": uint64(lists.VerdictOwn),
			"LIST_VERDICT": uint64(lists.VerdictMask), "LIST_IN_ALLOW": uint64(lists.InAllow), "LIST_IN_DENY": uint64(lists.InDeny),
		})
		for _, b := range []uint8{lists.InAllow, lists.InDeny} {
			assert.EqualValues(t, 0, b&lists.VerdictMask, "list bit %#x overlaps the verdict the program reads (%#x)", b, lists.VerdictMask)
		}
	})
	t.Run("traffic_class", func(t *testing.T) {
		valued(t, "traffic_class", map[string]uint64{
			"CLASS_PROTECTED": uint64(classProtected), "CLASS_UNPROTECTED": uint64(classUnprotected), "MAX_CLASSES": uint64(numClasses),
		})
		got := spec.Maps[bpf.ShieldMapAdmission].MaxEntries
		assert.EqualValues(t, numClasses, got, "admission MaxEntries = %d, want %d (a bucket per class)", got, numClasses)
	})
	t.Run("credit", func(t *testing.T) {
		valued(t, "credit", map[string]uint64{"TOKEN": config.Token})
	})
	t.Run("capacity", func(t *testing.T) {
		valued(t, "dst_capacity", map[string]uint64{"MAX_PROTECTED_DSTS": uint64(config.MaxProtectedDsts)})
		got := spec.Maps[bpf.ShieldMapProtectedDsts].MaxEntries
		assert.EqualValues(t, uint32(config.MaxProtectedDsts), got, "protected_dsts MaxEntries = %d, want %d", got, config.MaxProtectedDsts)
		got = spec.Maps[bpf.ShieldMapAggregates].MaxEntries
		assert.EqualValues(t, uint32(config.MaxAggregates), got, "aggregates MaxEntries = %d, want %d (MAX_AGGREGATES)", got, config.MaxAggregates)
		got = spec.Maps[bpf.ShieldMapPresence].MaxEntries
		assert.EqualValues(t, 2*filterWords, got, "presence MaxEntries = %d words, want %d: two filters of filterBits (%d) slots; FILTER_BITS and filterBits differ", got, 2*filterWords, filterBits)
		valued(t, "list_capacity", map[string]uint64{
			"MAX_LIST_ENTRIES": uint64(lists.MaxEntries), "MAX_OWN_ENTRIES": uint64(maxOwn),
			"MAX_RULES": uint64(maxRules), "NO_RULE": uint64(noRule),
		})
		for _, m := range []string{bpf.ShieldMapLists4, bpf.ShieldMapLists6, bpf.ShieldMapLists4B, bpf.ShieldMapLists6B} {
			got := spec.Maps[m].MaxEntries
			assert.EqualValues(t, uint32(2*lists.MaxEntries+maxOwn), got, "%s MaxEntries = %d, want %d: both lists full and the own addresses", m, got, 2*lists.MaxEntries+maxOwn)
		}
		for _, m := range []string{bpf.ShieldMapOwn4Addrs, bpf.ShieldMapOwn6Addrs} {
			got := spec.Maps[m].MaxEntries
			assert.EqualValues(t, uint32(maxOwn), got, "%s MaxEntries = %d, want %d", m, got, maxOwn)
		}
	})

	// The counters: the map has a key per (verdict, reason, proto), and
	// counter.Index gives each its own.
	t.Run("counters", func(t *testing.T) {
		got := spec.Maps[bpf.ShieldMapCounters].MaxEntries
		assert.EqualValues(t, uint32(counter.Size), got, "counters MaxEntries = %d, want %d verdicts x %d reasons x %d protos", got, len(counter.Verdicts()), len(counter.Reasons()), len(counter.Protos()))
		seen := map[uint32]string{}
		for _, v := range counter.Verdicts() {
			for _, r := range counter.Reasons() {
				for _, p := range counter.Protos() {
					i, what := counter.Index(v, r, p), fmt.Sprintf("%s/%s/%s", v, r, p)
					assert.False(t, i >= uint32(counter.Size) || seen[i] != "", "counter.Index(%s) = %d, out of range or also %q's", what, i, seen[i])
					seen[i] = what
					k := counter.Keys[i]
					assert.False(t, k.V != v || k.R != r || k.P != p, "counter.Keys[%d] = %s/%s/%s, want %s", i, k.V, k.R, k.P, what)
				}
			}
		}
	})
}

func asU64[T ~uint8](xs []T) []uint64 {
	out := make([]uint64, len(xs))
	for i, x := range xs {
		out[i] = uint64(x)
	}
	return out
}
