package lists

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xdpshield/xdpshield/bpf"
)

// List names an address list.
type List uint8

const (
	AllowList List = iota // never limited; wins over the deny list
	DenyList              // always dropped
)

func (l List) String() string {
	if l == AllowList {
		return "allow"
	}
	return "deny"
}

// MaxEntries is MAX_LIST_ENTRIES in bpf/shield.c (per list and family).
const MaxEntries = int(bpf.ShieldListCapacityMAX_LIST_ENTRIES)

// ParsePrefixes parses CIDRs or bare addresses (taken as /32 or /128). It
// reports every bad entry, names them, and returns nothing when any is bad.
// Host bits must be zero: "198.18.0.1/16" is an error, not a silent mask.
func ParsePrefixes(ss []string) ([]netip.Prefix, error) {
	var errs []error
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		p, err := parsePrefix(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q: zones are not allowed", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q: write IPv4-mapped prefixes as IPv4", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

func SortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
}

// PrefixesOf returns the prefixes of have, sorted.
func PrefixesOf(have map[netip.Prefix]bool) []netip.Prefix {
	ps := make([]netip.Prefix, 0, len(have))
	for p := range have {
		ps = append(ps, p)
	}
	SortPrefixes(ps)
	return ps
}

// ListChange is what one Add or Remove did, read under the same lock as
// the change, so racing changes each report their own prefixes.
type ListChange struct {
	List    List
	Added   []netip.Prefix // put on the list by this change (Add), sorted
	Removed []netip.Prefix // taken off by this change (Remove), sorted
	Before  int            // prefixes on the list before the change
	After   []netip.Prefix // the list after the change, as List returns it
}
