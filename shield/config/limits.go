package config

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/xdpshield/xdpshield/bpf"
	"github.com/xdpshield/xdpshield/shield/counter"
)

// token is the credit one packet costs: TOKEN in bpf/shield.c. It stays
// untyped (it meets int64 credit and uint64 limits); the array lengths
// below fail the build when it and the generated TOKEN differ.
const Token = 1_000_000_000

var (
	_ [Token - uint64(bpf.ShieldCreditTOKEN)]struct{}
	_ [uint64(bpf.ShieldCreditTOKEN) - Token]struct{}
)

// maxRate and maxBurst bound limits so that credit arithmetic in the program
// (burst * token, elapsed * rate) cannot overflow a signed 64-bit value.
const (
	MaxRate  = 1_000_000_000
	MaxBurst = 1_000_000_000
)

// Default key prefix lengths: an IPv4 source is one address; an IPv6
// source is one /64, the smallest prefix a site is given, so a host with a
// /64 of its own is one source, not 2^64.
const (
	DefaultKeyPrefix4 = 32
	DefaultKeyPrefix6 = 64
)

// maxProtectedDsts is MAX_PROTECTED_DSTS in bpf/shield.c: destinations
// protected on one address.
const MaxProtectedDsts = int(bpf.ShieldDstCapacityMAX_PROTECTED_DSTS)

// Limits is the shield's configuration of the data path; it changes without
// a reload. It is the one type that carries these settings from the
// configuration file (TOML) or the API (JSON) to the program: Validate is
// the one check.
type Limits struct {
	Rate           uint64 `json:"rate" toml:"rate"`                       // packets per second per source
	Burst          uint64 `json:"burst" toml:"burst"`                     // packets a source may send at once
	AdmissionRate  uint64 `json:"admission_rate" toml:"admission_rate"`   // new sources admitted per second, all CPUs together
	AdmissionBurst uint64 `json:"admission_burst" toml:"admission_burst"` // new sources admitted at once
	DryRun         bool   `json:"dry_run" toml:"dry_run"`                 // count would-be limit/admission drops, pass them
	// Protected names the destinations held to the limits above (what the
	// edge serves). When it names any, return traffic of the edge's own
	// connections is judged by Unprotected: UDP, TCP without SYN (or with
	// SYN+ACK) and ICMP errors quoting TCP or UDP, to the edge's
	// ephemeral ports (Options.Ephemeral) and not to a destination named
	// here. Everything else (a SYN to any port, ICMP echo, other
	// protocols) is held to the limits above. Empty: every packet is.
	Protected []Destination `json:"protected" toml:"protected"`
	// Unprotected are the limits of return traffic (see Protected), per
	// source and for strangers, counted as `unprotected`. Zero:
	// DefaultUnprotected.
	Unprotected ClassLimits `json:"unprotected" toml:"unprotected"`
	// KeyPrefix4 and KeyPrefix6 are the prefix lengths a source is keyed
	// by: every address of one prefix shares one bucket. Zero: the
	// defaults, 32 and 64.
	KeyPrefix4 uint8 `json:"key_prefix4" toml:"key_prefix4"`
	KeyPrefix6 uint8 `json:"key_prefix6" toml:"key_prefix6"`
	// Aggregates are the capacities of protected destinations: packets/s
	// shared by every source, checked after the source's own limit.
	// Tracked sources within their own rate are served first: a
	// stranger, or a source whose own bucket a packet leaves under half
	// full (it sends at or over its rate), passes only while the
	// destination's bucket holds more than half its burst, so those are
	// shed first. Empty: none.
	Aggregates []Aggregate `json:"aggregates,omitempty" toml:"aggregates,omitempty"`
}

// Aggregate is the capacity of one protected destination (a protocol and
// port on every address, or icmp), shared by every source.
type Aggregate struct {
	Destination Destination `json:"destination" toml:"destination"`
	Rate        uint64      `json:"rate" toml:"rate"`   // packets per second, all sources together
	Burst       uint64      `json:"burst" toml:"burst"` // packets at once, all sources together
}

// String writes a as ParseAggregate reads it: "udp/53=10000/20000".
func (a Aggregate) String() string {
	return fmt.Sprintf("%s=%d/%d", a.Destination, a.Rate, a.Burst)
}

// ParseAggregate reads DEST=RATE/BURST, DEST a protected destination with
// no address ("udp/53=10000/20000": 10,000 packets/s, burst 20,000).
func ParseAggregate(s string) (Aggregate, error) {
	var a Aggregate
	dst, lim, ok := strings.Cut(s, "=")
	rate, burst, ok2 := strings.Cut(lim, "/")
	if !ok || !ok2 {
		return a, fmt.Errorf("%q: want DEST=RATE/BURST (udp/53=10000/20000)", s)
	}
	d, err := ParseDestination(dst)
	if err != nil {
		return a, err
	}
	a.Destination = d
	if a.Rate, err = strconv.ParseUint(rate, 10, 64); err != nil {
		return a, fmt.Errorf("%q: bad rate %q", s, rate)
	}
	if a.Burst, err = strconv.ParseUint(burst, 10, 64); err != nil {
		return a, fmt.Errorf("%q: bad burst %q", s, burst)
	}
	return a, nil
}

// maxAggregates is MAX_AGGREGATES in bpf/shield.c (the aggregates map's
// size; TestContract holds them together).
const MaxAggregates = 64

// ClassLimits are the limits of one traffic class.
type ClassLimits struct {
	Rate           uint64 `json:"rate" toml:"rate"`
	Burst          uint64 `json:"burst" toml:"burst"`
	AdmissionRate  uint64 `json:"admission_rate" toml:"admission_rate"`
	AdmissionBurst uint64 `json:"admission_burst" toml:"admission_burst"`
}

// DefaultLimits are generous for a human-driven client and tight for a flood:
// 1000 packets/s per source with a burst of 2000, and 10,000 new sources/s,
// on the edge's listeners (TCP 80 and 443, UDP 443 for QUIC) and on
// everything else but return traffic, which gets DefaultUnprotected.
func DefaultLimits() Limits {
	return Limits{Rate: 1000, Burst: 2000, AdmissionRate: 10000, AdmissionBurst: 10000,
		Protected: []Destination{
			{Proto: counter.ProtoTCP, Port: 80},
			{Proto: counter.ProtoTCP, Port: 443},
			{Proto: counter.ProtoUDP, Port: 443},
		},
		Unprotected: DefaultUnprotected(),
		KeyPrefix4:  DefaultKeyPrefix4, KeyPrefix6: DefaultKeyPrefix6,
	}
}

// DefaultUnprotected bounds return traffic generously:
// 250,000 packets/s per source (3 Gbit/s of 1500-byte frames, an origin's
// download) with as large a burst, and 10,000 new sources/s.
func DefaultUnprotected() ClassLimits {
	return ClassLimits{Rate: 250_000, Burst: 250_000, AdmissionRate: 10000, AdmissionBurst: 10000}
}

// withDefaults fills the fields whose zero means a default, and puts
// Protected in its canonical order (sorted, without duplicates), so that
// what Limits returns compares equal to what was set.
func (l Limits) WithDefaults() Limits {
	if l.Unprotected == (ClassLimits{}) {
		l.Unprotected = DefaultUnprotected()
	}
	if l.KeyPrefix4 == 0 {
		l.KeyPrefix4 = DefaultKeyPrefix4
	}
	if l.KeyPrefix6 == 0 {
		l.KeyPrefix6 = DefaultKeyPrefix6
	}
	l.Protected = slices.Clone(l.Protected)
	slices.SortFunc(l.Protected, Destination.compare)
	l.Protected = slices.Compact(l.Protected)
	if len(l.Aggregates) == 0 {
		l.Aggregates = nil
	} else {
		l.Aggregates = slices.Clone(l.Aggregates)
		slices.SortStableFunc(l.Aggregates, func(a, b Aggregate) int { return a.Destination.compare(b.Destination) })
	}
	return l
}

// IsZero reports whether l is the zero Limits (which Load reads as
// DefaultLimits).
func (l Limits) IsZero() bool { return reflect.ValueOf(l).IsZero() }

// Equal reports whether l and o configure the same thing.
func (l Limits) Equal(o Limits) bool {
	l, o = l.WithDefaults(), o.WithDefaults()
	if !slices.Equal(l.Protected, o.Protected) {
		return false
	}
	l.Protected, o.Protected = nil, nil
	return reflect.DeepEqual(l, o)
}

// Validate reports every problem of l at once; the error wraps ErrInvalid.
func (l Limits) Validate() error {
	var errs []error
	check := func(name string, v, max uint64) {
		if v == 0 || v > max {
			errs = append(errs, fmt.Errorf("%s %d out of range [1, %d]", name, v, max))
		}
	}
	check("rate", l.Rate, MaxRate)
	check("burst", l.Burst, MaxBurst)
	check("admission_rate", l.AdmissionRate, MaxRate)
	check("admission_burst", l.AdmissionBurst, MaxBurst)
	if u := l.Unprotected; u != (ClassLimits{}) {
		check("unprotected.rate", u.Rate, MaxRate)
		check("unprotected.burst", u.Burst, MaxBurst)
		check("unprotected.admission_rate", u.AdmissionRate, MaxRate)
		check("unprotected.admission_burst", u.AdmissionBurst, MaxBurst)
	}
	if l.KeyPrefix4 > 32 {
		errs = append(errs, fmt.Errorf("key_prefix4 %d out of range [1, 32] (0: %d)", l.KeyPrefix4, DefaultKeyPrefix4))
	}
	if l.KeyPrefix6 > 128 {
		errs = append(errs, fmt.Errorf("key_prefix6 %d out of range [1, 128] (0: %d)", l.KeyPrefix6, DefaultKeyPrefix6))
	}
	addrs := 0
	for _, d := range l.Protected {
		if err := d.validate(); err != nil {
			errs = append(errs, fmt.Errorf("protected: %w", err))
		}
		if d.Addr.IsValid() {
			addrs++
		}
	}
	if addrs > MaxProtectedDsts {
		errs = append(errs, fmt.Errorf("protected: %d destinations with an address; the limit is %d", addrs, MaxProtectedDsts))
	}
	errs = append(errs, l.validateAggregates()...)
	if len(errs) > 0 {
		return inputError{errors.Join(errs...)}
	}
	return nil
}

// validateAggregates checks each aggregate limit: a protected destination
// with no address, named once, with a rate and burst in range.
func (l Limits) validateAggregates() []error {
	var errs []error
	if len(l.Aggregates) > MaxAggregates {
		errs = append(errs, fmt.Errorf("aggregates: %d; the limit is %d", len(l.Aggregates), MaxAggregates))
	}
	seen := map[Destination]bool{}
	for _, a := range l.Aggregates {
		d := a.Destination
		name := "aggregates: " + d.String()
		if err := d.validate(); err != nil {
			errs = append(errs, fmt.Errorf("aggregates: %w", err))
			continue
		}
		if d.Addr.IsValid() {
			errs = append(errs, fmt.Errorf("%s: an aggregate limit holds on every address (write %s/%d)", name, d.Proto, d.Port))
		}
		if seen[d] {
			errs = append(errs, fmt.Errorf("%s: named twice", name))
		}
		seen[d] = true
		if len(l.Protected) > 0 && !slices.Contains(l.Protected, d) {
			errs = append(errs, fmt.Errorf("%s: not a protected destination (only protected traffic is held to an aggregate limit)", name))
		}
		if a.Rate == 0 || a.Rate > MaxRate {
			errs = append(errs, fmt.Errorf("%s: rate %d out of range [1, %d]", name, a.Rate, MaxRate))
		}
		if a.Burst == 0 || a.Burst > MaxBurst {
			errs = append(errs, fmt.Errorf("%s: burst %d out of range [1, %d]", name, a.Burst, MaxBurst))
		}
	}
	return errs
}

// aggKey is the destination's key in the aggregates map.
func (a Aggregate) AggKey() bpf.ShieldAggKey {
	k := bpf.ShieldAggKey{Proto: uint8(a.Destination.Proto)}
	if a.Destination.Proto != counter.ProtoICMP {
		k.Port = a.Destination.Port<<8 | a.Destination.Port>>8 // network order
	}
	return k
}

// Value is the aggregate's entry in the aggregates map: a full bucket
// (last_ns 0: the first refill fills it), the limit, and the reserve a
// stranger leaves: half the burst.
func (a Aggregate) Value() bpf.ShieldAggregate {
	lim := BucketLimit(a.Rate, a.Burst)
	return bpf.ShieldAggregate{Bucket: bpf.ShieldBucket{Credit: int64(lim.Cap)}, Limit: lim, Reserve: int64(a.Burst / 2 * Token)}
}

// checkTick refuses limits a clock that advances once per tick of tickNs
// cannot honour: a bucket is refilled once per tick, by at most its burst,
// so a burst under ceil(rate / HZ) caps the rate at burst x HZ.
func (l Limits) CheckTick(clock Clock, tickNs uint64) error {
	if tickNs == 0 {
		return nil
	}
	hz := 1_000_000_000 / tickNs
	var errs []error
	check := func(prefix string, rate, burst uint64) {
		need := (rate + hz - 1) / hz
		if burst < need {
			errs = append(errs, fmt.Errorf("%sburst %d is below ceil(%srate / HZ) = ceil(%d / %d): the %s clock refills once per tick, "+
				"which would cap the rate at %d/s; it needs %sburst %d or more (or clock = \"ktime\")",
				prefix, burst, prefix, rate, hz, clock, burst*hz, prefix, need))
		}
	}
	check("", l.Rate, l.Burst)
	check("admission_", l.AdmissionRate, l.AdmissionBurst)
	u := l.WithDefaults().Unprotected
	check("unprotected.", u.Rate, u.Burst)
	check("unprotected.admission_", u.AdmissionRate, u.AdmissionBurst)
	for _, a := range l.Aggregates {
		check("aggregates "+a.Destination.String()+": ", a.Rate, a.Burst)
	}
	if len(errs) > 0 {
		return inputError{errors.Join(errs...)}
	}
	return nil
}

func BucketLimit(rate, burst uint64) bpf.ShieldLimit {
	c := burst * Token
	return bpf.ShieldLimit{Rate: rate, Cap: c, FillNs: (c + rate - 1) / rate}
}

// config flags: CONFIG_* in bpf/shield.c, as bpf2go emits them. The top
// byte is no flag: it records the clock the state was written with
// (clockShift).
const (
	FlagDryRun      = uint32(bpf.ShieldConfigFlagCONFIG_DRY_RUN)
	FlagAllow4      = uint32(bpf.ShieldConfigFlagCONFIG_ALLOW4)
	FlagAllow6      = uint32(bpf.ShieldConfigFlagCONFIG_ALLOW6)
	FlagDeny4       = uint32(bpf.ShieldConfigFlagCONFIG_DENY4)
	FlagDeny6       = uint32(bpf.ShieldConfigFlagCONFIG_DENY6)
	FlagOwn4        = uint32(bpf.ShieldConfigFlagCONFIG_OWN4)
	FlagOwn6        = uint32(bpf.ShieldConfigFlagCONFIG_OWN6)
	FlagProtect     = uint32(bpf.ShieldConfigFlagCONFIG_PROTECT)
	FlagProtectICMP = uint32(bpf.ShieldConfigFlagCONFIG_PROTECT_ICMP)
	FlagProtectAddr = uint32(bpf.ShieldConfigFlagCONFIG_PROTECT_ADDR)
	FlagAggregate   = uint32(bpf.ShieldConfigFlagCONFIG_AGGREGATE)
	FlagListsB      = uint32(bpf.ShieldConfigFlagCONFIG_LISTS_B)

	// ListFlagsMask are the flags that follow the lists' contents, and
	// the verdict generation in force.
	ListFlagsMask = FlagAllow4 | FlagAllow6 | FlagDeny4 | FlagDeny6 | FlagOwn4 | FlagOwn6 | FlagListsB
)

// clockShift places the clock + 1 in the top byte of the config flags
// (CONFIG_CLOCK_SHIFT: the program reads none of those bits): the clock is
// part of the pinned state (0: not recorded).
const ClockShift = uint32(bpf.ShieldConfigFlagCONFIG_CLOCK_SHIFT)

// portWords is PORT_WORDS, the length of the config's port bitmaps.
const portWords = len(bpf.ShieldConfig{}.TcpPorts)

// config builds what the program reads: l (with its defaults filled), the
// list flags, the clock and the own addresses compared inline (at most
// OwnInline per family).
func (l Limits) Config(lists uint32, clock Clock, own []netip.Addr) bpf.ShieldConfig {
	cfg := bpf.ShieldConfig{
		Source:               BucketLimit(l.Rate, l.Burst),
		Admission:            BucketLimit(l.AdmissionRate, l.AdmissionBurst),
		Unprotected:          BucketLimit(l.Unprotected.Rate, l.Unprotected.Burst),
		UnprotectedAdmission: BucketLimit(l.Unprotected.AdmissionRate, l.Unprotected.AdmissionBurst),
		Flags:                lists&ListFlagsMask | (uint32(clock)+1)<<ClockShift,
	}
	mask4 := prefixMask(4, int(l.KeyPrefix4))
	mask6 := prefixMask(16, int(l.KeyPrefix6))
	cfg.Mask4 = le32(mask4)
	cfg.Mask6[0], cfg.Mask6[1] = le64(mask6[:8]), le64(mask6[8:])
	for _, a := range own {
		if a.Is4() && int(cfg.Own4N) < OwnInline {
			b := a.As4()
			cfg.Own4[cfg.Own4N] = le32(b[:])
			cfg.Own4N++
		} else if !a.Is4() && int(cfg.Own6N) < OwnInline {
			b := a.As16()
			cfg.Own6[cfg.Own6N] = [2]uint64{le64(b[:8]), le64(b[8:])}
			cfg.Own6N++
		}
	}
	if l.DryRun {
		cfg.Flags |= FlagDryRun
	}
	if len(l.Protected) > 0 {
		cfg.Flags |= FlagProtect
	}
	if len(l.Aggregates) > 0 {
		cfg.Flags |= FlagAggregate
	}
	for _, d := range l.Protected {
		var words *[portWords]uint64
		switch {
		case d.Proto == counter.ProtoICMP:
			cfg.Flags |= FlagProtectICMP
			continue
		case d.Proto == counter.ProtoTCP && d.Addr.IsValid():
			words = &cfg.TcpAddrPorts
			cfg.Flags |= FlagProtectAddr
		case d.Proto == counter.ProtoTCP:
			words = &cfg.TcpPorts
		case d.Addr.IsValid():
			words = &cfg.UdpAddrPorts
			cfg.Flags |= FlagProtectAddr
		default:
			words = &cfg.UdpPorts
		}
		words[d.Port>>6] |= 1 << (d.Port & 63)
	}
	return cfg
}

// prefixMask is the mask of a bits-long prefix, n bytes long.
func prefixMask(n, bits int) []byte {
	m := make([]byte, n)
	for i := range bits {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// le32 and le64 read mask bytes as the (little-endian) program reads them.
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func le64(b []byte) uint64 { return uint64(le32(b[:4])) | uint64(le32(b[4:8]))<<32 }

// bitsOf is the prefix length of a mask the program holds.
func bitsOf(m uint64, n int) int {
	bits := 0
	for i := range n {
		if byte(m>>(8*i)) == 0xff {
			bits += 8
			continue
		}
		for b := byte(m >> (8 * i)); b&0x80 != 0; b <<= 1 {
			bits++
		}
		break
	}
	return bits
}

// limitsOf reads back what config wrote; dsts are the address-specific
// protected destinations, from protected_dsts.
func LimitsOf(cfg bpf.ShieldConfig, dsts []Destination) Limits {
	l := Limits{
		Rate:           cfg.Source.Rate,
		Burst:          cfg.Source.Cap / Token,
		AdmissionRate:  cfg.Admission.Rate,
		AdmissionBurst: cfg.Admission.Cap / Token,
		DryRun:         cfg.Flags&FlagDryRun != 0,
		Unprotected: ClassLimits{Rate: cfg.Unprotected.Rate, Burst: cfg.Unprotected.Cap / Token,
			AdmissionRate: cfg.UnprotectedAdmission.Rate, AdmissionBurst: cfg.UnprotectedAdmission.Cap / Token},
		KeyPrefix4: uint8(bitsOf(uint64(cfg.Mask4), 4)),
	}
	hi := bitsOf(cfg.Mask6[1], 8)
	l.KeyPrefix6 = uint8(bitsOf(cfg.Mask6[0], 8))
	if l.KeyPrefix6 == 64 {
		l.KeyPrefix6 += uint8(hi)
	}
	if cfg.Flags&FlagProtectICMP != 0 {
		l.Protected = append(l.Protected, Destination{Proto: counter.ProtoICMP})
	}
	for _, pw := range []struct {
		p counter.Proto
		w *[portWords]uint64
	}{{counter.ProtoTCP, &cfg.TcpPorts}, {counter.ProtoUDP, &cfg.UdpPorts}} {
		for i, w := range pw.w {
			for b := range 64 {
				if w&(1<<b) != 0 {
					l.Protected = append(l.Protected, Destination{Proto: pw.p, Port: uint16(i*64 + b)})
				}
			}
		}
	}
	l.Protected = append(l.Protected, dsts...)
	return l.WithDefaults()
}

// Destination is a protected destination: a protocol (tcp, udp or icmp),
// a port (tcp and udp), and optionally one address. Written "tcp/443",
// "udp/198.18.0.1:53", "tcp/[2001:db8::1]:443" or "icmp".
type Destination struct {
	Proto counter.Proto
	Port  uint16
	Addr  netip.Addr // the zero Addr: every address
}

// ParseDestination reads the written form of a Destination.
func ParseDestination(s string) (Destination, error) {
	var d Destination
	if s == "icmp" {
		return Destination{Proto: counter.ProtoICMP}, nil
	}
	proto, rest, ok := strings.Cut(s, "/")
	switch {
	case !ok:
		return d, fmt.Errorf("%q: want tcp/PORT, udp/PORT, tcp/ADDR:PORT, udp/ADDR:PORT or icmp", s)
	case proto == "tcp":
		d.Proto = counter.ProtoTCP
	case proto == "udp":
		d.Proto = counter.ProtoUDP
	default:
		return d, fmt.Errorf("%q: unknown protocol %q (want tcp, udp or icmp)", s, proto)
	}
	if ap, err := netip.ParseAddrPort(rest); err == nil {
		if ap.Addr().Zone() != "" {
			return d, fmt.Errorf("%q: zones are not allowed", s)
		}
		d.Addr, d.Port = ap.Addr().Unmap(), ap.Port()
	} else {
		n, err := strconv.ParseUint(rest, 10, 16)
		if err != nil {
			return d, fmt.Errorf("%q: bad port %q", s, rest)
		}
		d.Port = uint16(n)
	}
	return d, d.validate()
}

func (d Destination) validate() error {
	switch d.Proto {
	case counter.ProtoICMP:
		if d.Port != 0 || d.Addr.IsValid() {
			return fmt.Errorf("%s: icmp takes no port nor address", d)
		}
	case counter.ProtoTCP, counter.ProtoUDP:
		if d.Port == 0 {
			return fmt.Errorf("%s: port 0", d)
		}
		if d.Addr.IsValid() && (d.Addr.Is4In6() || d.Addr.Zone() != "") {
			return fmt.Errorf("%s: write IPv4 addresses as IPv4, without zone", d)
		}
	default:
		return fmt.Errorf("protocol %s cannot be protected (want tcp, udp or icmp)", d.Proto)
	}
	return nil
}

func (d Destination) String() string {
	if d.Proto == counter.ProtoICMP {
		return "icmp"
	}
	if d.Addr.IsValid() {
		return d.Proto.String() + "/" + netip.AddrPortFrom(d.Addr, d.Port).String()
	}
	return d.Proto.String() + "/" + strconv.Itoa(int(d.Port))
}

// MarshalText writes d as ParseDestination reads it (JSON, TOML).
func (d Destination) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads d with ParseDestination.
func (d *Destination) UnmarshalText(b []byte) error {
	v, err := ParseDestination(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

func (d Destination) compare(o Destination) int {
	if c := cmp.Compare(d.Proto, o.Proto); c != 0 {
		return c
	}
	if c := d.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	return cmp.Compare(d.Port, o.Port)
}

// dstKey is d's key in protected_dsts.
func (d Destination) DstKey() bpf.ShieldDstKey {
	// As16 maps an IPv4 address as ::ffff:a.b.c.d, as the program does.
	k := bpf.ShieldDstKey{Addr: d.Addr.As16(), Proto: uint8(d.Proto)}
	k.Port = d.Port<<8 | d.Port>>8 // network order, as the program reads it
	return k
}

// OwnInline is OWN_INLINE in bpf/shield.c: the config's inline own
// addresses per family.
const OwnInline = len(bpf.ShieldConfig{}.Own4)
