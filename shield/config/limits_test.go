package config

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/shield/counter"
)

func TestParseDestination(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Destination
		wantErr string
	}{
		{in: "tcp/443", want: Destination{Proto: counter.ProtoTCP, Port: 443}},
		{in: "udp/53", want: Destination{Proto: counter.ProtoUDP, Port: 53}},
		{in: "icmp", want: Destination{Proto: counter.ProtoICMP}},
		{in: "udp/198.18.0.1:53", want: Destination{Proto: counter.ProtoUDP, Port: 53, Addr: netip.MustParseAddr("198.18.0.1")}},
		{in: "tcp/[2001:db8::1]:443", want: Destination{Proto: counter.ProtoTCP, Port: 443, Addr: netip.MustParseAddr("2001:db8::1")}},
		{in: "tcp/0", wantErr: "port 0"},
		{in: "tcp/65536", wantErr: "bad port"},
		{in: "sctp/9", wantErr: "unknown protocol"},
		{in: "443", wantErr: "want tcp/PORT"},
		{in: "icmp/1", wantErr: "unknown protocol"},
	} {
		got, err := ParseDestination(tc.in)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, "ParseDestination(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			continue
		}
		require.NoError(t, err, "ParseDestination(%q)", tc.in)
		assert.Equal(t, tc.want, got, "ParseDestination(%q)", tc.in)
		assert.Equal(t, tc.in, got.String(), "ParseDestination(%q).String()", tc.in)
	}
}

// TestLimitsOneType: the same Limits reads from TOML and JSON, and round
// trips through the program's configuration (limitsOf(config)).
func TestLimitsOneType(t *testing.T) {
	var fromTOML struct {
		Limits Limits `toml:"limits"`
	}
	_, err := toml.Decode(`
[limits]
rate = 10
burst = 20
admission_rate = 30
admission_burst = 40
protected = ["tcp/443", "udp/198.18.0.1:53", "icmp"]
key_prefix6 = 56
[limits.unprotected]
rate = 1000
burst = 2000
admission_rate = 300
admission_burst = 400
`, &fromTOML)
	require.NoError(t, err, "toml.Decode")
	l := fromTOML.Limits
	require.NoError(t, l.Validate(), "Validate()")
	b, err := json.Marshal(l)
	require.NoError(t, err)
	var fromJSON Limits
	require.NoError(t, json.Unmarshal(b, &fromJSON))
	assert.True(t, l.Equal(fromJSON), "JSON round trip: %s", b)

	cfg := l.WithDefaults().Config(0, ClockKtime, nil)
	var addr []Destination
	for _, d := range l.Protected {
		if d.Addr.IsValid() {
			addr = append(addr, d)
		}
	}
	back := LimitsOf(cfg, addr)
	assert.Equal(t, l.WithDefaults(), back, "LimitsOf(config())")
	assert.Equal(t, uint8(32), back.KeyPrefix4, "default key_prefix4")
}

func TestLimitsValidateWrapsErrInvalid(t *testing.T) {
	for _, bad := range []Limits{
		{},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1, KeyPrefix4: 33},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1, KeyPrefix6: 129},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1, Unprotected: ClassLimits{Rate: 1}},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1, Protected: []Destination{{Proto: counter.ProtoOther, Port: 1}}},
	} {
		err := bad.Validate()
		assert.ErrorIs(t, err, ErrInvalid, "Limits(%+v).Validate() = %v, want an error wrapping ErrInvalid", bad, err)
	}
}

// TestAggregatesValidate (issue 26, finding 2): aggregate limits come from
// TOML ([[limits.aggregates]]) and the CLI's DEST=RATE/BURST, and Validate
// refuses each one the program could not hold: a destination not
// protected, one with an address, one named twice, a rate or burst out of
// range, more than the map holds.
func TestAggregatesValidate(t *testing.T) {
	var fromTOML struct {
		Limits Limits `toml:"limits"`
	}
	_, err := toml.Decode(`
[limits]
rate = 1000
burst = 2000
admission_rate = 10000
admission_burst = 10000
protected = ["tcp/443", "udp/53", "icmp"]
[[limits.aggregates]]
destination = "udp/53"
rate = 10000
burst = 20000
[[limits.aggregates]]
destination = "icmp"
rate = 100
burst = 100
`, &fromTOML)
	require.NoError(t, err, "toml.Decode")
	l := fromTOML.Limits
	require.NoError(t, l.Validate())
	udp53 := Destination{Proto: counter.ProtoUDP, Port: 53}
	require.Equal(t, []Aggregate{{udp53, 10000, 20000}, {Destination{Proto: counter.ProtoICMP}, 100, 100}}, l.Aggregates)
	a, err := ParseAggregate("udp/53=10000/20000")
	require.NoError(t, err)
	assert.Equal(t, l.Aggregates[0], a, "ParseAggregate")
	assert.Equal(t, "udp/53=10000/20000", a.String())
	for _, bad := range []string{"udp/53", "udp/53=10", "udp/53=x/1", "udp/53=1/y", "sctp/1=1/1"} {
		_, err := ParseAggregate(bad)
		assert.Error(t, err, "ParseAggregate(%q)", bad)
	}

	tooMany := make([]Aggregate, MaxAggregates+1)
	for i := range tooMany {
		tooMany[i] = Aggregate{Destination{Proto: counter.ProtoUDP, Port: uint16(i + 1)}, 1, 1}
	}
	for _, tc := range []struct {
		aggs []Aggregate
		want string
	}{
		{[]Aggregate{{Destination{Proto: counter.ProtoUDP, Port: 54}, 1, 1}}, "udp/54: not a protected destination"},
		{[]Aggregate{{Destination{Proto: counter.ProtoUDP, Port: 53, Addr: netip.MustParseAddr("198.18.0.1")}, 1, 1}}, "holds on every address"},
		{[]Aggregate{{udp53, 1, 1}, {udp53, 2, 2}}, "udp/53: named twice"},
		{[]Aggregate{{udp53, 0, 1}}, "rate 0 out of range"},
		{[]Aggregate{{udp53, 1, MaxBurst + 1}}, "burst 1000000001 out of range"},
		{tooMany, "aggregates: 65; the limit is 64"},
	} {
		bad := l
		bad.Aggregates = tc.aggs
		if len(tc.aggs) == len(tooMany) {
			bad.Protected = nil // everything protected
		}
		err := bad.Validate()
		require.Error(t, err, "%v", tc.aggs)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), tc.want)
	}
}
