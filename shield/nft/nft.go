package nft

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"xdpshield/shield"
)

// DefaultTable is the name of the netdev table Render writes.
const DefaultTable = "xdpshield"

// Counter names, one per reason the shield counts (the nftables twin has
// no not_ip or malformed: it passes what it does not match, uncounted).
const (
	CounterAllow     = "allow"
	CounterDeny      = "deny"
	CounterAdmission = "admission"
	CounterLimit     = "limit"
	CounterOK        = "ok"
)

// Counters lists the counters a rendered table carries, in rule order.
var Counters = []string{CounterAllow, CounterDeny, CounterAdmission, CounterLimit, CounterOK}

// Config is what the ruleset is made of: the fields of a shield
// configuration nftables can express.
type Config struct {
	Table     string   // nftables table name; "": DefaultTable
	Ifaces    []string // the protected interfaces (one chain hooks them all, sharing the sets)
	TableSize uint32   // capacity of each per-source set (one per family)
	Limits    shield.Limits
	Allow     []netip.Prefix
	Deny      []netip.Prefix
	// Timeout is how long an idle source stays in its set; 0: a minute.
	// The shield's LRU keeps a source until the table needs its slot; an
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
// atomically (declare, delete, define: one transaction) with
//
//   - allow4/allow6 and deny4/deny6, interval sets of the lists' prefixes;
//     allow is matched first, so it wins over deny as in the shield;
//   - admission: a source in neither per-source set is a stranger; strangers
//     share one `limit rate over` (the admission rate and burst) and past it
//     are dropped without being added, as the shield's admission bucket does;
//   - sources4/sources6, dynamic sets keyed by source address whose elements
//     each carry a `limit rate over RATE/second burst BURST packets`: the
//     per-source bucket. A full set adds nothing and the packet falls
//     through to accept (the shield's LRU evicts instead);
//   - named counters per reason, read back by ReadCounters.
//
// With Limits.DryRun the admission and limit rules count and do not drop;
// deny still drops, as in the shield.
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
	fmt.Fprintf(&b, "table netdev %s\ndelete table netdev %s\ntable netdev %s {\n", t, t, t)
	for _, name := range Counters {
		fmt.Fprintf(&b, "\tcounter %s { }\n", counterObj(name))
	}
	fmt.Fprintf(&b, "\tlimit admission { rate over %d/second burst %d packets }\n", l.AdmissionRate, l.AdmissionBurst)
	set := func(name, typ, flags, extra string, ps []netip.Prefix) {
		fmt.Fprintf(&b, "\tset %s {\n\t\ttype %s\n\t\tflags %s\n%s", name, typ, flags, extra)
		if len(ps) > 0 {
			elems := make([]string, len(ps))
			for i, p := range ps {
				elems[i] = p.Masked().String()
			}
			fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(elems, ", "))
		}
		b.WriteString("\t}\n")
	}
	allow4, allow6 := split(c.Allow)
	deny4, deny6 := split(c.Deny)
	set("allow4", "ipv4_addr", "interval", "", allow4)
	set("allow6", "ipv6_addr", "interval", "", allow6)
	set("deny4", "ipv4_addr", "interval", "", deny4)
	set("deny6", "ipv6_addr", "interval", "", deny6)
	dyn := fmt.Sprintf("\t\tsize %d\n\t\ttimeout %ds\n", c.TableSize, int64((timeout+time.Second-1)/time.Second))
	set("sources4", "ipv4_addr", "dynamic,timeout", dyn, nil)
	set("sources6", "ipv6_addr", "dynamic,timeout", dyn, nil)

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
	fmt.Fprintf(&b, "\tchain ingress {\n\t\ttype filter hook ingress %s priority -500; policy accept;\n", dev)
	rule := func(s string) { fmt.Fprintf(&b, "\t\t%s\n", s) }
	rule(fmt.Sprintf("ip saddr @allow4 counter name %q accept", counterObj(CounterAllow)))
	rule(fmt.Sprintf("ip6 saddr @allow6 counter name %q accept", counterObj(CounterAllow)))
	rule(fmt.Sprintf("ip saddr @deny4 counter name %q drop", counterObj(CounterDeny)))
	rule(fmt.Sprintf("ip6 saddr @deny6 counter name %q drop", counterObj(CounterDeny)))
	// Strangers (in neither per-source set) share one named limit, global
	// as the shield's admission bucket is; past it they are dropped before
	// the update below could add them.
	for _, fam := range []struct{ n, proto, sel string }{{"4", "ip", "ip saddr"}, {"6", "ip6", "ip6 saddr"}} {
		rule(fmt.Sprintf("meta protocol %s %s != @sources%s limit name \"admission\" counter name %q%s",
			fam.proto, fam.sel, fam.n, counterObj(CounterAdmission), verdict))
	}
	for _, fam := range []struct{ n, sel string }{{"4", "ip saddr"}, {"6", "ip6 saddr"}} {
		rule(fmt.Sprintf("update @sources%s { %s limit rate over %d/second burst %d packets } counter name %q%s",
			fam.n, fam.sel, l.Rate, l.Burst, counterObj(CounterLimit), verdict))
	}
	rule(fmt.Sprintf("meta protocol { ip, ip6 } counter name %q", counterObj(CounterOK)))
	b.WriteString("\t}\n")
	b.WriteString("}\n")
	return b.String(), nil
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
