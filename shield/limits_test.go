package shield

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDestination(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Destination
		wantErr string
	}{
		{in: "tcp/443", want: Destination{Proto: ProtoTCP, Port: 443}},
		{in: "udp/53", want: Destination{Proto: ProtoUDP, Port: 53}},
		{in: "icmp", want: Destination{Proto: ProtoICMP}},
		{in: "udp/198.18.0.1:53", want: Destination{Proto: ProtoUDP, Port: 53, Addr: netip.MustParseAddr("198.18.0.1")}},
		{in: "tcp/[2001:db8::1]:443", want: Destination{Proto: ProtoTCP, Port: 443, Addr: netip.MustParseAddr("2001:db8::1")}},
		{in: "tcp/0", wantErr: "port 0"},
		{in: "tcp/65536", wantErr: "bad port"},
		{in: "sctp/9", wantErr: "unknown protocol"},
		{in: "443", wantErr: "want tcp/PORT"},
		{in: "icmp/1", wantErr: "unknown protocol"},
	} {
		got, err := ParseDestination(tc.in)
		if tc.wantErr != "" {
			if err == nil || !assert.Contains(t, err.Error(), tc.wantErr, "ParseDestination(%q) error", tc.in) {
				t.Errorf("ParseDestination(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
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

	cfg := l.withDefaults().config(0, ClockKtime, nil)
	var addr []Destination
	for _, d := range l.Protected {
		if d.Addr.IsValid() {
			addr = append(addr, d)
		}
	}
	back := limitsOf(cfg, addr)
	assert.Equal(t, l.withDefaults(), back, "limitsOf(config())")
	assert.Equal(t, uint8(32), back.KeyPrefix4, "default key_prefix4")
}

func TestLimitsValidateWrapsErrInvalid(t *testing.T) {
	for _, bad := range []Limits{
		{},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1, KeyPrefix4: 33},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1, KeyPrefix6: 129},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1, Unprotected: ClassLimits{Rate: 1}},
		{Rate: 1, Burst: 1, AdmissionRate: 1, AdmissionBurst: 1, Protected: []Destination{{Proto: ProtoOther, Port: 1}}},
	} {
		err := bad.Validate()
		if err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("Limits(%+v).Validate() = %v, want an error wrapping ErrInvalid", bad, err)
		}
	}
}
