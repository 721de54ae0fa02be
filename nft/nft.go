package nft

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/counter"
)

// DefaultTable is the name of the netdev table Render writes.
const DefaultTable = "xdpshield"

// Counter names, one per reason the shield counts (the nftables twin has
// no not_ip or malformed: it passes what it does not match, uncounted).
// The shield counts both verdicts of the unprotected class under one
// reason; the twin splits them.
const (
	CounterSpoofed         = "spoofed"
	CounterAllow           = "allow"
	CounterDeny            = "deny"
	CounterAdmission       = "admission"
	CounterLimit           = "limit"
	CounterOK              = "ok"
	CounterUnprotectedPass = "unprotected_pass"
	CounterUnprotectedDrop = "unprotected_drop"
)

// Counters lists the counters a rendered table carries, in rule order.
var Counters = []string{CounterSpoofed, CounterAllow, CounterDeny, CounterAdmission, CounterLimit, CounterOK,
	CounterUnprotectedPass, CounterUnprotectedDrop}

// Destination is a protected destination: TCP or UDP to a port (on every
// address, or on Addr only), or ICMP (and ICMPv6).
type Destination struct {
	Proto string     // "tcp", "udp" or "icmp"
	Port  uint16     // tcp and udp
	Addr  netip.Addr // the zero Addr: every address
}

// Class is the limits of one traffic class.
type Class struct {
	Rate, Burst, AdmissionRate, AdmissionBurst uint64
}

// Config is what the ruleset is made of: the fields of a shield
// configuration nftables can express.
type Config struct {
	Table     string   // nftables table name; "": DefaultTable
	Ifaces    []string // the protected interfaces (one chain hooks them all, sharing the sets)
	TableSize uint32   // capacity of each per-source set (one per family)
	Limits    config.Limits
	Allow     []netip.Prefix
	Deny      []netip.Prefix
	// Protected names the destinations held to Limits; return traffic
	// (UDP, TCP without SYN or with SYN+ACK, to an Ephemeral port; ICMP
	// and ICMPv6 errors unless "icmp" is named) that none names is held
	// to Unprotected, everything else to Limits, as in the shield. Empty:
	// every packet is held to Limits (and Unprotected is unused).
	Protected   []Destination
	Unprotected Class
	// Ephemeral is the edge's ephemeral port range
	// (config.LocalPortRange); zero: config.DefaultEphemeral.
	Ephemeral config.PortRange
	// KeyPrefix4 and KeyPrefix6 key a source by its prefix: every address
	// of one shares a bucket. 0: 32 and 128 (one address).
	KeyPrefix4, KeyPrefix6 uint8
	// Own are the machine's own addresses: a frame from the wire that
	// claims one is forged, and dropped as spoofed (so are IPv4-mapped
	// IPv6 sources, always).
	Own []netip.Prefix
	// Timeout is how long an idle source stays in its set; 0: a minute.
	// The shield keeps a source until its set needs the way; an
	// nftables set can only time entries out, so a returning source past
	// the timeout is a stranger again (and pays an admission token).
	Timeout time.Duration
}

func (c Config) table() string {
	if c.Table == "" {
		return DefaultTable
	}
	return c.Table
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Ifaces) == 0 {
		errs = append(errs, errors.New("no interface"))
	}
	for _, i := range c.Ifaces {
		if i == "" || strings.ContainsAny(i, "\"\\ \t\n,{}") {
			errs = append(errs, fmt.Errorf("interface %q: not a name nft can quote", i))
		}
	}
	if !validName(c.table()) {
		errs = append(errs, fmt.Errorf("table %q: want letters, digits and _", c.table()))
	}
	if c.TableSize == 0 {
		errs = append(errs, errors.New("table size 0"))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.KeyPrefix4 > 32 || c.KeyPrefix6 > 128 {
		errs = append(errs, fmt.Errorf("key prefixes /%d and /%d: at most /32 and /128", c.KeyPrefix4, c.KeyPrefix6))
	}
	for _, d := range c.Protected {
		switch {
		case d.Proto == "icmp" && (d.Port != 0 || d.Addr.IsValid()):
			errs = append(errs, fmt.Errorf("protected %+v: icmp takes no port nor address", d))
		case d.Proto == "tcp" || d.Proto == "udp":
			if d.Port == 0 {
				errs = append(errs, fmt.Errorf("protected %s: port 0", d.Proto))
			}
		case d.Proto != "icmp":
			errs = append(errs, fmt.Errorf("protected %+v: proto %q, want tcp, udp or icmp", d, d.Proto))
		}
	}
	if len(c.Protected) > 0 {
		u := c.Unprotected
		if u.Rate == 0 || u.Burst == 0 || u.AdmissionRate == 0 || u.AdmissionBurst == 0 {
			errs = append(errs, fmt.Errorf("unprotected limits %+v: every one must be set when destinations are protected", u))
		}
	}
	if e := c.Ephemeral; e != (config.PortRange{}) && (e.Lo == 0 || e.Lo > e.Hi) {
		errs = append(errs, fmt.Errorf("ephemeral port range %s: want 1 <= low <= high", e))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", c.Timeout))
	}
	return errors.Join(errs...)
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Render returns the ruleset: a script for `nft -f` that replaces the table
// atomically (declare, delete, define: one transaction) with, in the
// shield's order,
//
//   - spoofed sources dropped: IPv4-mapped IPv6 ones, and the machine's own
//     addresses (own4/own6) arriving from the wire;
//   - allow4/allow6 and deny4/deny6, interval sets of the lists' prefixes;
//     allow is matched first, so it wins over deny as in the shield;
//   - the class: protected destinations (a set of proto . port, and of
//     address . proto . port, plus ICMP) jump to chain sources; then
//     return traffic (UDP, and TCP without SYN or with SYN+ACK, to an
//     ephemeral port; ICMP and ICMPv6 errors) to chain unprotected; the
//     rest to chain sources; with none named, everything goes to sources;
//   - in each class, admission: a source key (the address masked to the key
//     prefix) in neither class's set is a stranger; strangers of the class
//     share one named `limit rate over` (its admission rate and burst), and
//     past it are dropped without being added, as the shield's admission
//     bucket does;
//   - then the class's dynamic set keyed by source, whose elements each
//     carry a `limit rate over RATE/second burst BURST packets`: the
//     per-source bucket. A full set adds nothing and the packet falls
//     through to accept (the shield replaces an idle or the least recently
//     seen source of its set instead);
//   - named counters per reason, read back by ReadCounters.
//
// With Limits.DryRun the admission and limit rules count and do not drop;
// spoofed and deny still drop, as in the shield. Where the twin differs:
// an ICMP or ICMPv6 error is return traffic here whatever it quotes; the
// shield also wants the quoted flow to be TCP or UDP from an ephemeral
// port.
func Render(c Config) (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("nft config: %w", err)
	}
	l := c.Limits
	timeout := c.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	verdict := " drop"
	if l.DryRun {
		verdict = " # dry run: counted, passed"
	}
	t := c.table()
	var b strings.Builder
	fmt.Fprintf(&b, "# xdpshield: the nftables twin of the shield on %s (shield nft)\n", strings.Join(c.Ifaces, ", "))
	fmt.Fprintf(&b, "# limits: %d packets/s per source, burst %d; admission %d strangers/s, burst %d; dry run %v\n",
		l.Rate, l.Burst, l.AdmissionRate, l.AdmissionBurst, l.DryRun)
	if len(c.Protected) > 0 {
		names := make([]string, len(c.Protected))
		for i, d := range c.Protected {
			names[i] = d.String()
		}
		u := c.Unprotected
		fmt.Fprintf(&b, "# protected: %s; the rest: %d packets/s per source, burst %d; admission %d/s, burst %d\n",
			strings.Join(names, ", "), u.Rate, u.Burst, u.AdmissionRate, u.AdmissionBurst)
	}
	fmt.Fprintf(&b, "table netdev %s\ndelete table netdev %s\ntable netdev %s {\n", t, t, t)
	for _, name := range Counters {
		fmt.Fprintf(&b, "\tcounter %s { }\n", counterObj(name))
	}
	fmt.Fprintf(&b, "\tlimit admission { rate over %d/second burst %d packets }\n", l.AdmissionRate, l.AdmissionBurst)
	for _, a := range l.Aggregates {
		fmt.Fprintf(&b, "\tlimit %s { rate over %d/second burst %d packets }\n", aggregateName(a), a.Rate, a.Burst)
	}
	if len(c.Protected) > 0 {
		fmt.Fprintf(&b, "\tlimit admission_unprotected { rate over %d/second burst %d packets }\n", c.Unprotected.AdmissionRate, c.Unprotected.AdmissionBurst)
	}
	set := func(name, typ, flags, extra string, elems []string) {
		fmt.Fprintf(&b, "\tset %s {\n\t\ttype %s\n", name, typ)
		if flags != "" {
			fmt.Fprintf(&b, "\t\tflags %s\n", flags)
		}
		b.WriteString(extra)
		if len(elems) > 0 {
			fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(elems, ", "))
		}
		b.WriteString("\t}\n")
	}
	prefixes := func(ps []netip.Prefix) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.Masked().String()
		}
		return out
	}
	own4, own6 := split(c.Own)
	allow4, allow6 := split(c.Allow)
	deny4, deny6 := split(c.Deny)
	set("own4", "ipv4_addr", "interval", "", prefixes(own4))
	set("own6", "ipv6_addr", "interval", "", prefixes(own6))
	set("allow4", "ipv4_addr", "interval", "", prefixes(allow4))
	set("allow6", "ipv6_addr", "interval", "", prefixes(allow6))
	set("deny4", "ipv4_addr", "interval", "", prefixes(deny4))
	set("deny6", "ipv6_addr", "interval", "", prefixes(deny6))
	var ports, addr4, addr6 []string
	icmp := false
	for _, d := range c.Protected {
		switch {
		case d.Proto == "icmp":
			icmp = true
		case !d.Addr.IsValid():
			ports = append(ports, fmt.Sprintf("%s . %d", d.Proto, d.Port))
		case d.Addr.Unmap().Is4():
			addr4 = append(addr4, fmt.Sprintf("%s . %s . %d", d.Addr.Unmap(), d.Proto, d.Port))
		default:
			addr6 = append(addr6, fmt.Sprintf("%s . %s . %d", d.Addr, d.Proto, d.Port))
		}
	}
	if len(c.Protected) > 0 {
		set("protected", "inet_proto . inet_service", "", "", ports)
		set("protected4", "ipv4_addr . inet_proto . inet_service", "", "", addr4)
		set("protected6", "ipv6_addr . inet_proto . inet_service", "", "", addr6)
	}
	dyn := fmt.Sprintf("\t\tsize %d\n\t\ttimeout %ds\n", c.TableSize, int64((timeout+time.Second-1)/time.Second))
	classes := []string{"sources"}
	if len(c.Protected) > 0 {
		classes = append(classes, "unprotected")
	}
	for _, cl := range classes {
		set(cl+"4", "ipv4_addr", "dynamic,timeout", dyn, nil)
		set(cl+"6", "ipv6_addr", "dynamic,timeout", dyn, nil)
	}

	// Several devices on one chain need kernel 5.5; one is written the
	// older way.
	dev := fmt.Sprintf("device %q", c.Ifaces[0])
	if len(c.Ifaces) > 1 {
		q := make([]string, len(c.Ifaces))
		for i, d := range c.Ifaces {
			q[i] = fmt.Sprintf("%q", d)
		}
		dev = "devices = { " + strings.Join(q, ", ") + " }"
	}
	rule := func(s string) { fmt.Fprintf(&b, "\t\t%s\n", s) }
	fmt.Fprintf(&b, "\tchain ingress {\n\t\ttype filter hook ingress %s priority -500; policy accept;\n", dev)
	rule(fmt.Sprintf("ip6 saddr ::ffff:0.0.0.0/96 counter name %q drop", counterObj(CounterSpoofed)))
	rule(fmt.Sprintf("ip saddr @own4 counter name %q drop", counterObj(CounterSpoofed)))
	rule(fmt.Sprintf("ip6 saddr @own6 counter name %q drop", counterObj(CounterSpoofed)))
	rule(fmt.Sprintf("ip saddr @allow4 counter name %q accept", counterObj(CounterAllow)))
	rule(fmt.Sprintf("ip6 saddr @allow6 counter name %q accept", counterObj(CounterAllow)))
	rule(fmt.Sprintf("ip saddr @deny4 counter name %q drop", counterObj(CounterDeny)))
	rule(fmt.Sprintf("ip6 saddr @deny6 counter name %q drop", counterObj(CounterDeny)))
	if len(c.Protected) == 0 {
		rule("meta protocol { ip, ip6 } jump sources")
	} else {
		if len(ports) > 0 {
			rule("meta l4proto . th dport @protected jump sources")
		}
		if len(addr4) > 0 {
			rule("ip daddr . meta l4proto . th dport @protected4 jump sources")
		}
		if len(addr6) > 0 {
			rule("ip6 daddr . meta l4proto . th dport @protected6 jump sources")
		}
		if icmp {
			rule("meta l4proto { icmp, ipv6-icmp } jump sources")
		}
		// Return traffic (bpf/shield.c, class_of); nftables' transport
		// header lies past IPv6 extension headers, as the shield's walk.
		eph := c.Ephemeral
		if eph == (config.PortRange{}) {
			eph = config.DefaultEphemeral
		}
		rule(fmt.Sprintf("udp dport %d-%d jump unprotected", eph.Lo, eph.Hi))
		rule(fmt.Sprintf("tcp flags & (syn | ack) != syn tcp dport %d-%d jump unprotected", eph.Lo, eph.Hi))
		if !icmp {
			rule("icmp type { destination-unreachable, time-exceeded, parameter-problem } jump unprotected")
			rule("icmpv6 type { destination-unreachable, packet-too-big, time-exceeded, parameter-problem } jump unprotected")
		}
		rule("meta protocol { ip, ip6 } jump sources")
	}
	b.WriteString("\t}\n")

	key4, key6 := "ip saddr", "ip6 saddr"
	if p := c.KeyPrefix4; p != 0 && p < 32 {
		key4 = "ip saddr & " + maskString(32, int(p))
	}
	if p := c.KeyPrefix6; p != 0 && p < 128 {
		key6 = "ip6 saddr & " + maskString(128, int(p))
	}
	// A stranger is in neither class's set: the shield keeps one entry per
	// source with a bucket for each class.
	stranger := func(fam string) string {
		key, n := key4, "4"
		if fam == "ip6" {
			key, n = key6, "6"
		}
		s := fmt.Sprintf("meta protocol %s %s != @sources%s", fam, key, n)
		if len(c.Protected) > 0 {
			s += fmt.Sprintf(" %s != @unprotected%s", key, n)
		}
		return s
	}
	chain := func(name, admission string, rate, burst uint64, passed, over string) {
		fmt.Fprintf(&b, "\tchain %s {\n", name)
		for _, fam := range []string{"ip", "ip6"} {
			rule(fmt.Sprintf("%s limit name %q counter name %q%s", stranger(fam), admission, counterObj(CounterAdmission), verdict))
		}
		rule(fmt.Sprintf("update @%s4 { %s limit rate over %d/second burst %d packets } counter name %q%s", name, key4, rate, burst, counterObj(over), verdict))
		rule(fmt.Sprintf("update @%s6 { %s limit rate over %d/second burst %d packets } counter name %q%s", name, key6, rate, burst, counterObj(over), verdict))
		if name == "sources" {
			// Aggregate limits: one named limit per destination,
			// shared by every source alike. nftables' limit has no
			// reserve to read, so it cannot serve established sources
			// first as the shield does (docs/nft.md).
			for _, a := range l.Aggregates {
				match := fmt.Sprintf("meta l4proto %s th dport %d", a.Destination.Proto, a.Destination.Port)
				if a.Destination.Proto == counter.ProtoICMP {
					match = "meta l4proto { icmp, ipv6-icmp }"
				}
				rule(fmt.Sprintf("%s limit name %q counter name %q%s", match, aggregateName(a), counterObj(over), verdict))
			}
		}
		rule(fmt.Sprintf("counter name %q accept", counterObj(passed)))
		b.WriteString("\t}\n")
	}
	chain("sources", "admission", l.Rate, l.Burst, CounterOK, CounterLimit)
	if len(c.Protected) > 0 {
		u := c.Unprotected
		chain("unprotected", "admission_unprotected", u.Rate, u.Burst, CounterUnprotectedPass, CounterUnprotectedDrop)
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// aggregateName names the limit object of an aggregate limit: agg_udp_53.
func aggregateName(a config.Aggregate) string {
	if a.Destination.Proto == counter.ProtoICMP {
		return "agg_icmp"
	}
	return fmt.Sprintf("agg_%s_%d", a.Destination.Proto, a.Destination.Port)
}

// maskString is the address of bits bits whose first ones bits are set.
func maskString(bits, ones int) string {
	return netip.PrefixFrom(allOnes(bits), ones).Masked().Addr().String()
}

func allOnes(bits int) netip.Addr {
	if bits == 32 {
		return netip.AddrFrom4([4]byte{255, 255, 255, 255})
	}
	var a [16]byte
	for i := range a {
		a[i] = 255
	}
	return netip.AddrFrom16(a)
}

func (d Destination) String() string {
	switch {
	case d.Proto == "icmp":
		return "icmp"
	case d.Addr.IsValid():
		return d.Proto + "/" + netip.AddrPortFrom(d.Addr, d.Port).String()
	}
	return fmt.Sprintf("%s/%d", d.Proto, d.Port)
}

func counterObj(name string) string { return "c_" + name }

func split(ps []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range ps {
		if p.Addr().Is4() || p.Addr().Is4In6() && p.Bits() >= 96 {
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	sortPrefixes(v4)
	sortPrefixes(v6)
	return v4, v6
}

func sortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
}

// Runner runs nft with args and stdin, and returns its output; nil: nft in
// the caller's network namespace. Tests run it through `ip netns exec`.
type Runner func(ctx context.Context, stdin []byte, args ...string) ([]byte, error)

// Local runs the nft binary found in PATH in the calling process's namespace.
func Local(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	return run(exec.CommandContext(ctx, "nft", args...), stdin)
}

// Command adapts an *exec.Cmd maker (topo.NS.Command, say) into a Runner.
func Command(mk func(name string, args ...string) *exec.Cmd) Runner {
	return func(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
		return run(mk("nft", args...), stdin)
	}
}

func run(cmd *exec.Cmd, stdin []byte) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

func runner(r Runner) Runner {
	if r == nil {
		return Local
	}
	return r
}

// Check asks nft to parse and evaluate ruleset without applying it (nft -c).
func Check(ctx context.Context, r Runner, ruleset string) error {
	if _, err := runner(r)(ctx, []byte(ruleset), "-c", "-f", "-"); err != nil {
		return fmt.Errorf("nft check: %w", err)
	}
	return nil
}

// Apply loads ruleset (as Render makes it: it replaces its table whole).
func Apply(ctx context.Context, r Runner, ruleset string) error {
	if _, err := runner(r)(ctx, []byte(ruleset), "-f", "-"); err != nil {
		return fmt.Errorf("nft apply: %w", err)
	}
	return nil
}

// Delete removes table (DefaultTable if empty); a missing table is no error.
func Delete(ctx context.Context, r Runner, table string) error {
	if table == "" {
		table = DefaultTable
	}
	// Declaring it first makes the delete succeed when it is absent.
	script := fmt.Sprintf("table netdev %s\ndelete table netdev %s\n", table, table)
	if _, err := runner(r)(ctx, []byte(script), "-f", "-"); err != nil {
		return fmt.Errorf("nft delete table: %w", err)
	}
	return nil
}

// ReadCounters returns the packets each named counter of table has seen.
func ReadCounters(ctx context.Context, r Runner, table string) (map[string]uint64, error) {
	if table == "" {
		table = DefaultTable
	}
	out, err := runner(r)(ctx, nil, "-j", "list", "counters", "table", "netdev", table)
	if err != nil {
		return nil, fmt.Errorf("nft list counters: %w", err)
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("decode nft counters: %w", err)
	}
	m := map[string]uint64{}
	for _, o := range doc.Nftables {
		if o.Counter != nil {
			m[strings.TrimPrefix(o.Counter.Name, "c_")] = o.Counter.Packets
		}
	}
	return m, nil
}

// SetSize returns how many elements a set of table holds (sources4, say).
func SetSize(ctx context.Context, r Runner, table, set string) (int, error) {
	if table == "" {
		table = DefaultTable
	}
	out, err := runner(r)(ctx, nil, "-j", "list", "set", "netdev", table, set)
	if err != nil {
		return 0, fmt.Errorf("nft list set: %w", err)
	}
	var doc struct {
		Nftables []struct {
			Set *struct {
				Elem []json.RawMessage `json:"elem"`
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, fmt.Errorf("decode nft set: %w", err)
	}
	for _, o := range doc.Nftables {
		if o.Set != nil {
			return len(o.Set.Elem), nil
		}
	}
	return 0, fmt.Errorf("nft list set %s: no set in the answer", set)
}

// WithLimits returns c with l: the client limits, the destinations they
// protect, the unprotected class and the source key prefixes, each with the
// shield's default where l leaves it zero, so the twin judges as the shield
// configured with l does.
func (c Config) WithLimits(l config.Limits) Config {
	c.Limits = l
	c.Protected = nil
	for _, d := range l.Protected {
		c.Protected = append(c.Protected, Destination{Proto: d.Proto.String(), Port: d.Port, Addr: d.Addr})
	}
	u := l.Unprotected
	if u == (config.ClassLimits{}) {
		u = config.DefaultUnprotected()
	}
	c.Unprotected = Class(u)
	c.KeyPrefix4, c.KeyPrefix6 = cmp.Or(l.KeyPrefix4, 32), cmp.Or(l.KeyPrefix6, 64)
	return c
}

// Hosts turns addresses into host prefixes (/32, /128).
func Hosts(addrs []netip.Addr) []netip.Prefix {
	ps := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		a = a.Unmap()
		ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
	}
	return ps
}
