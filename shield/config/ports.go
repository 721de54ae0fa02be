package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PortRange is a range of ports, both ends included.
type PortRange struct {
	Lo, Hi uint16
}

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// Contains says whether port p is in r.
func (r PortRange) Contains(p uint16) bool { return p >= r.Lo && p <= r.Hi }

// Validate says whether r is a range of ports, low to high, without 0.
func (r PortRange) Validate() error {
	if r.Lo == 0 || r.Lo > r.Hi {
		return fmt.Errorf("ephemeral port range %s: want 1 <= low <= high", r)
	}
	return nil
}

// DefaultEphemeral is Linux's default net.ipv4.ip_local_port_range, the
// range a load without Options.Ephemeral assumes.
var DefaultEphemeral = PortRange{Lo: 32768, Hi: 60999}

// localPortRangePath is the sysctl of the ports the kernel picks a
// connection's local port from (IPv6 shares it). Under /proc/sys/net it
// answers for the network namespace of the thread that opens it.
const localPortRangePath = "/proc/sys/net/ipv4/ip_local_port_range"

// LocalPortRange reads the ephemeral port range of the calling thread's
// network namespace (net.ipv4.ip_local_port_range): the ports the edge's
// own connections are answered on, the return traffic the unprotected
// class is for (bpf/shield.c, class_of).
func LocalPortRange() (PortRange, error) {
	b, err := os.ReadFile(localPortRangePath)
	if err != nil {
		return PortRange{}, fmt.Errorf("read the ephemeral port range: %w", err)
	}
	return parsePortRange(string(b))
}

// parsePortRange reads ip_local_port_range's "low\thigh\n".
func parsePortRange(s string) (PortRange, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return PortRange{}, fmt.Errorf("ephemeral port range %q: want two ports", s)
	}
	var r PortRange
	for i, p := range []*uint16{&r.Lo, &r.Hi} {
		n, err := strconv.ParseUint(f[i], 10, 16)
		if err != nil {
			return PortRange{}, fmt.Errorf("ephemeral port range %q: %w", s, err)
		}
		*p = uint16(n)
	}
	return r, r.Validate()
}
