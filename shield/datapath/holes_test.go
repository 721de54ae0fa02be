package datapath

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/sim"
)

// The tests of this file are named after the findings of issue 9, each of
// which let a frame through that should drop, or dropped one that should pass.

// TestClockRestartDoesNotStall (finding 1): buckets written by a clock far
// ahead of the one reading them (jiffies x ns_per_jiffy carries ~2^32
// jiffies of offset; ktime does not) must not stall: a last_ns further
// ahead than a full refill counts as a full refill.
func TestClockRestartDoesNotStall(t *testing.T) {
	s := load(t, 4096, config.Limits{Rate: 1000, Burst: 5, AdmissionRate: 100, AdmissionBurst: 2})
	udp := counter.ProtoUDP
	a := sim.From("198.18.0.1", sim.UDP).Bytes()
	// The jiffies clock's reading at HZ=250 after ~199 days of offset.
	ahead := time.Duration(1<<32) * 4 * time.Millisecond
	behind := time.Second // ktime: seconds since boot
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		{Name: "drain on the clock ahead", At: ahead, Frame: a, Times: 5, Want: sim.Pass, Delta: N(5, pass, counter.ReasonOK, udp)},
		{Name: "drained", At: ahead, Frame: a, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
		{Name: "second stranger spends the admission bucket", At: ahead, Frame: sim.From("198.18.0.2", sim.UDP).Bytes(), Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
		{Name: "restart on a clock behind: the drained source refills", At: behind + 300*time.Millisecond, Frame: a, Times: 5, Want: sim.Pass, Delta: N(5, pass, counter.ReasonOK, udp)},
		{Name: "and is limited again at its burst", At: behind + 300*time.Millisecond, Frame: a, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
		{Name: "a stranger is admitted", At: behind + 300*time.Millisecond, Frame: sim.From("198.18.0.3", sim.UDP).Bytes(), Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
		{Name: "and one more", At: behind + 300*time.Millisecond, Frame: sim.From("198.18.0.4", sim.UDP).Bytes(), Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
		{Name: "then the refilled admission bucket is empty", At: behind + 300*time.Millisecond, Frame: sim.From("198.18.0.5", sim.UDP).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonAdmission, udp)},
		{Name: "and refills at its rate from there", At: behind + 310*time.Millisecond, Frame: sim.From("198.18.0.5", sim.UDP).Bytes(), Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
	}}.Run(t)
}

// TestMappedIPv6Spoofed (finding 3): an IPv6 frame whose source is an
// IPv4-mapped address (::ffff:a.b.c.d) is forged: no host sends one on the
// wire, and Linux's IPv6 input drops it (ip6_rcv_core). It is dropped as
// spoofed, before the lists, and never touches the IPv4 address's bucket.
func TestMappedIPv6Spoofed(t *testing.T) {
	s := load(t, 4096, config.Limits{Rate: 1, Burst: 3, AdmissionRate: 100, AdmissionBurst: 100})
	addList(t, s, lists.DenyList, "198.18.0.7/32")
	addList(t, s, lists.AllowList, "198.18.0.8/32")
	udp := counter.ProtoUDP
	mapped := func(v4 string) []byte {
		return sim.Frame{Src: netip.MustParseAddr("::ffff:" + v4), Dst: netip.MustParseAddr("2001:db8:ffff::fffe"), L4: sim.UDP}.Bytes()
	}
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		{Name: "deny-listed IPv4 source", At: sec, Frame: sim.From("198.18.0.7", sim.UDP).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonDeny, udp)},
		{Name: "the same, mapped", At: sec, Frame: mapped("198.18.0.7"), Times: 3, Want: sim.Drop, Delta: N(3, drop, counter.ReasonSpoofed, udp)},
		{Name: "allow-listed IPv4 source, mapped", At: sec, Frame: mapped("198.18.0.8"), Want: sim.Drop, Delta: One(drop, counter.ReasonSpoofed, udp)},
		{Name: "forged as another IPv4 source", At: sec, Frame: mapped("198.18.0.9"), Times: 3, Want: sim.Drop, Delta: N(3, drop, counter.ReasonSpoofed, udp)},
		{Name: "whose bucket is untouched", At: sec, Frame: sim.From("198.18.0.9", sim.UDP).Bytes(), Times: 3, Want: sim.Pass, Delta: N(3, pass, counter.ReasonOK, udp)},
		{Name: "and then empty", At: sec, Frame: sim.From("198.18.0.9", sim.UDP).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
	}}.Run(t)
}

// TestOwnAddressSpoofed (finding 4): a frame arriving with one of the
// machine's own addresses as its source is forged: dropped as spoofed, even
// when an allow-listed prefix covers the address; the rest of that prefix
// stays allowed. A machine with a few addresses per family has them
// compared inline; one with more has them in the verdict tries: both ways.
func TestOwnAddressSpoofed(t *testing.T) {
	for _, extra := range []int{0, 12} {
		t.Run(fmt.Sprintf("%d more own addresses per family", extra), func(t *testing.T) {
			s := load(t, 4096, config.Limits{Rate: 1, Burst: 1, AdmissionRate: 100, AdmissionBurst: 100})
			addList(t, s, lists.AllowList, "198.18.0.0/24", "2001:db8::/64")
			own := []string{"198.18.0.1", "2001:db8::1"}
			for i := range extra {
				own = append(own, fmt.Sprintf("198.18.0.%d", 100+i), fmt.Sprintf("2001:db8::%x", 0x100+i))
			}
			// And one in a region (a /16) no list reaches: the region
			// bitmaps must name the tries' own addresses too.
			far := "198.19.200.1"
			if extra == 0 {
				far = "198.18.0.1"
			}
			setOwn(t, s, append(own, far)...)
			udp, tcp := counter.ProtoUDP, counter.ProtoTCP
			sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
				{Name: "own IPv4 address outside the lists' regions", At: sec, Frame: sim.From(far, sim.UDP).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonSpoofed, udp)},
				{Name: "own IPv4 address", At: sec, Frame: sim.From("198.18.0.1", sim.UDP).Bytes(), Times: 5, Want: sim.Drop, Delta: N(5, drop, counter.ReasonSpoofed, udp)},
				{Name: "own IPv6 address, double tagged", At: sec, Frame: sim.From("2001:db8::1", sim.TCP, sim.Double...).Bytes(), Times: 5, Want: sim.Drop, Delta: N(5, drop, counter.ReasonSpoofed, tcp)},
				{Name: "a neighbour in the allow-listed prefix", At: sec, Frame: sim.From("198.18.0.2", sim.UDP).Bytes(), Times: 5, Want: sim.Pass, Delta: N(5, pass, counter.ReasonAllow, udp)},
				{Name: "an unlisted stranger", At: sec, Frame: sim.From("198.18.1.1", sim.UDP).Bytes(), Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
			}}.Run(t)

			// Set back to one address per family, the others pass again.
			setOwn(t, s, "198.18.0.1", "2001:db8::1")
			sim.Scenario{Name: t.Name() + "/fewer", Target: Target(s), Steps: []sim.Step{
				{Name: "still own", At: sec, Frame: sim.From("2001:db8::1", sim.UDP).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonSpoofed, udp)},
				{Name: "no longer own", At: sec, Frame: sim.From("198.18.0.100", sim.UDP).Bytes(), Want: sim.Pass, Delta: One(pass, counter.ReasonAllow, udp)},
			}}.Run(t)
		})
	}
}

// TestReturnTrafficNotThrottled (finding 5): with the default limits,
// which protect the edge's listeners, replies to the edge's own connections
// (an origin's segments to an ephemeral port) are not held to a client's
// rate, while clients of the listeners still are.
func TestReturnTrafficNotThrottled(t *testing.T) {
	s := load(t, 4096, config.DefaultLimits())
	def := config.DefaultLimits()
	tcp := counter.ProtoTCP
	download := sim.Frame{Src: netipAddr("198.18.5.5"), Dst: netipAddr("198.18.255.254"), L4: sim.TCP, SrcPort: 443, DstPort: 40000, Seg: sim.ACK}.Bytes()
	n := int(3 * def.Burst)
	client := sim.Frame{Src: netipAddr("198.18.5.6"), Dst: netipAddr("198.18.255.254"), L4: sim.TCP, SrcPort: 40000, DstPort: 443}.Bytes()
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		{Name: "an origin's reply, 3 bursts at once", At: sec, Frame: download, Times: n, Want: sim.Pass, Delta: N(uint64(n), pass, counter.ReasonUnprotected, tcp)},
		{Name: "a client of the listener: its burst", At: sec, Frame: client, Times: int(def.Burst), Want: sim.Pass, Delta: N(def.Burst, pass, counter.ReasonOK, tcp)},
		{Name: "then limited", At: sec, Frame: client, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, tcp)},
	}}.Run(t)
}

// TestIPv6KeyedByPrefix (finding 6): IPv6 sources share one bucket per
// /64 (the default key prefix), so a host with a /64 gets one burst and
// spends one admission token, not one per address.
func TestIPv6KeyedByPrefix(t *testing.T) {
	const burst = 4
	s := load(t, 4096, config.Limits{Rate: 1, Burst: burst, AdmissionRate: 1000, AdmissionBurst: 2})
	udp := counter.ProtoUDP
	var steps []sim.Step
	for i := range 2 * burst {
		st := sim.Step{Name: fmt.Sprintf("address %d of one /64", i), At: sec, Frame: sim.From(fmt.Sprintf("2001:db8:6::%x", i+1), sim.UDP).Bytes(), Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)}
		if i >= burst {
			st.Want, st.Delta = sim.Drop, One(drop, counter.ReasonLimit, udp)
		}
		steps = append(steps, st)
	}
	steps = append(steps,
		sim.Step{Name: "another /64: its own bucket, the second admission", At: sec, Frame: sim.From("2001:db8:6:1::1", sim.UDP).Bytes(), Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
		sim.Step{Name: "IPv4 stays per address", At: sec, Frame: sim.From("198.18.6.1", sim.UDP).Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonAdmission, udp)},
	)
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: steps}.Run(t)
	got := source(t, s, "2001:db8:6::ffff")
	assert.Equal(t, netip.MustParsePrefix("2001:db8:6::/64"), got.Prefix, "Source().Prefix")
	assert.Equal(t, uint64(burst), got.Passed, "Source().Passed")
	assert.Equal(t, uint64(burst), got.Dropped, "Source().Dropped")
}

// TestProtectedDestinations: what Limits.Protected names is held to the
// client limits, return traffic (here: ACKs and UDP to ephemeral ports)
// that it does not name to the unprotected class, each with its own
// bucket per source and its own admission bucket.
func TestProtectedDestinations(t *testing.T) {
	dst := func(s string) config.Destination {
		d, err := config.ParseDestination(s)
		require.NoError(t, err, "ParseDestination(%q)", s)
		return d
	}
	l := config.Limits{Rate: 1, Burst: 2, AdmissionRate: 1, AdmissionBurst: 3,
		Protected:   []config.Destination{dst("tcp/443"), dst("udp/198.18.255.254:40053"), dst("udp/[2001:db8:ffff::fffe]:40053"), dst("icmp")},
		Unprotected: config.ClassLimits{Rate: 1, Burst: 5, AdmissionRate: 1, AdmissionBurst: 1}}
	s := load(t, 4096, l)
	assert.Equal(t, sortedDsts(l.Protected), sortedDsts(s.Limits().Protected), "Limits().Protected")
	tcp, udp, icmp := counter.ProtoTCP, counter.ProtoUDP, counter.ProtoICMP
	to := func(src, dst string, l4 sim.L4, port uint16) []byte {
		return sim.Frame{Src: netipAddr(src), Dst: netipAddr(dst), L4: l4, SrcPort: 40000, DstPort: port}.Bytes()
	}
	// An ACK: return traffic when its port is ephemeral and not named.
	ack := func(src, dst string, port uint16) []byte {
		return sim.Frame{Src: netipAddr(src), Dst: netipAddr(dst), L4: sim.TCP, SrcPort: 443, DstPort: port, Seg: sim.ACK}.Bytes()
	}
	const edge, other = "198.18.255.254", "198.18.255.253"
	fragment := to("198.18.7.1", edge, sim.UDP, 9)
	fragment[14+7] = 1 // fragment offset 8: no UDP header in this one
	sim.Scenario{Name: t.Name(), Target: Target(s), Steps: []sim.Step{
		{Name: "client of tcp/443: burst", At: sec, Frame: to("198.18.7.1", edge, sim.TCP, 443), Times: 2, Want: sim.Pass, Delta: N(2, pass, counter.ReasonOK, tcp)},
		{Name: "client of tcp/443: limited", At: sec, Frame: to("198.18.7.1", edge, sim.TCP, 443), Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, tcp)},
		{Name: "icmp is protected: same bucket", At: sec, Frame: sim.Frame{Src: netipAddr("198.18.7.1"), Dst: netipAddr(edge), L4: sim.ICMP}.Bytes(), Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, icmp)},
		{Name: "a non-first fragment: the strict class", At: sec, Frame: fragment, Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
		{Name: "same source, unprotected port: its own bucket", At: sec, Frame: ack("198.18.7.1", edge, 40001), Times: 5, Want: sim.Pass, Delta: N(5, pass, counter.ReasonUnprotected, tcp)},
		{Name: "unprotected bucket empty", At: sec, Frame: ack("198.18.7.1", edge, 40001), Want: sim.Drop, Delta: One(drop, counter.ReasonUnprotected, tcp)},
		{Name: "udp/40053 on the protected address", At: sec, Frame: to("198.18.7.2", edge, sim.UDP, 40053), Times: 2, Want: sim.Pass, Delta: N(2, pass, counter.ReasonOK, udp)},
		{Name: "udp/40053 on the protected address: limited", At: sec, Frame: to("198.18.7.2", edge, sim.UDP, 40053), Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, udp)},
		{Name: "udp/40053 on another address: unprotected", At: sec, Frame: to("198.18.7.2", other, sim.UDP, 40053), Want: sim.Pass, Delta: One(pass, counter.ReasonUnprotected, udp)},
		{Name: "IPv6 udp/40053 on the protected address", At: sec, Frame: to("2001:db8:7::1", "2001:db8:ffff::fffe", sim.UDP, 40053), Want: sim.Pass, Delta: One(pass, counter.ReasonOK, udp)},
		{Name: "protected admission spent", At: sec, Frame: to("198.18.7.3", edge, sim.TCP, 443), Want: sim.Drop, Delta: One(drop, counter.ReasonAdmission, tcp)},
		{Name: "unprotected admission has its own token", At: sec, Frame: ack("198.18.7.4", edge, 40002), Want: sim.Pass, Delta: One(pass, counter.ReasonUnprotected, tcp)},
		{Name: "and then none", At: sec, Frame: ack("198.18.7.5", edge, 40002), Want: sim.Drop, Delta: One(drop, counter.ReasonAdmission, tcp)},
		{Name: "the stranger admitted unprotected starts with a full protected bucket", At: sec, Frame: to("198.18.7.4", edge, sim.TCP, 443), Times: 2, Want: sim.Pass, Delta: N(2, pass, counter.ReasonOK, tcp)},
	}}.Run(t)

	// An empty list protects everything again.
	l.Protected = nil
	require.NoError(t, s.SetLimits(l))
	sim.Scenario{Name: t.Name() + "/nothing named", Target: Target(s), Steps: []sim.Step{
		{Name: "return traffic is held to the client limits", At: sec, Frame: ack("198.18.7.1", edge, 40001), Want: sim.Drop, Delta: One(drop, counter.ReasonLimit, tcp)},
	}}.Run(t)
}

func sortedDsts(ds []config.Destination) []config.Destination {
	out := slices.Clone(ds)
	slices.SortFunc(out, func(a, b config.Destination) int { return strings.Compare(a.String(), b.String()) })
	return out
}
