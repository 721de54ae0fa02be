package policy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	good := func() Config {
		return Config{Routes: []Route{{Name: "a", PathPrefix: "/", Backends: []string{"198.18.0.1:80"}}}}
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error, "" for none
	}{
		{"good", func(*Config) {}, ""},
		{"no routes", func(c *Config) { c.Routes = nil }, "l7.route: at least one"},
		{"bad prefix", func(c *Config) { c.Routes[0].PathPrefix = "x" }, "l7.route[0].path_prefix"},
		{"bad backend", func(c *Config) { c.Routes[0].Backends = []string{"nope"} }, "l7.route[0].backends[0]"},
		{"upper host", func(c *Config) { c.Routes[0].Host = "Example" }, "l7.route[0].host"},
		{"dup route", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "b", PathPrefix: "/", Backends: []string{"198.18.0.2:80"}})
		}, "already routed"},
		{"bad action", func(c *Config) { c.RBAC = []Rule{{Action: "maybe"}} }, "l7.rbac[0].action"},
		{"bad method", func(c *Config) { c.RBAC = []Rule{{Action: "deny", Methods: []string{"get"}}} }, "l7.rbac[0].methods[0]"},
		{"bad source", func(c *Config) { c.RBAC = []Rule{{Action: "deny", Source: "10.0.0.1"}} }, "l7.rbac[0].source"},
		{"value without header", func(c *Config) { c.RBAC = []Rule{{Action: "deny", Value: "x"}} }, "l7.rbac[0].value"},
		{"set hop-by-hop", func(c *Config) { c.SetHeader = Header{Name: "Connection", Value: "x"} }, "l7.set_header.name"},
		{"bad hash header", func(c *Config) { c.HashHeader = "a b" }, "l7.hash_header"},
	}
	ran := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ran++
			c := good()
			tt.mod(&c)
			err := c.Validate()
			if tt.want == "" {
				require.NoError(t, err, "Validate()")
				return
			}
			require.ErrorContains(t, err, tt.want, "Validate() = %v, want an error naming %q", err, tt.want)
			_, err = Compile(c)
			require.Error(t, err, "Compile accepted what Validate refused")
		})
	}
	require.NotZero(t, ran, "no cases ran")
}

func TestRingMovesFew(t *testing.T) {
	const n = 5
	var names []string
	var ids []int
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("198.18.0.%d:80", i+1))
		ids = append(ids, i)
	}
	full := buildRing(names, ids)
	// Remove backend 2; the others keep their ids.
	less := buildRing(append(append([]string{}, names[:2]...), names[3:]...), []int{0, 1, 3, 4})
	moved, owned := 0, 0
	for s := range full {
		if full[s] == 2 {
			owned++
			continue
		}
		if full[s] != less[s] {
			moved++
		}
	}
	assert.EqualValues(t, 0, moved, "%d slots of remaining backends moved, want 0", moved)
	assert.False(t, owned == 0 || float64(owned)/RingSlots > 2.0/n, "removed backend owned %d of %d slots, want about 1/%d", owned, RingSlots, n)
}

// TestValidateHidesValues: header values are often secrets (an API key a
// rule matches, a token set_header adds), and a refused policy's errors
// are logged (PUT /v1/l7/policy, serve's start): they name the field and
// the length, never the value.
func TestValidateHidesValues(t *testing.T) {
	secret := "s3cr3t-" + strings.Repeat("k", 40) // too long
	good := Config{Routes: []Route{{Name: "a", PathPrefix: "/", Backends: []string{"198.18.0.1:80"}}}}
	tests := []struct {
		name  string
		mod   func(*Config)
		field string
	}{
		{"rule value too long", func(c *Config) { c.RBAC = []Rule{{Action: "allow", Header: "x-key", Value: secret}} }, "l7.rbac[0].value"},
		{"rule value not visible", func(c *Config) { c.RBAC = []Rule{{Action: "allow", Header: "x-key", Value: "s3cr3t \x01"}} }, "l7.rbac[0].value"},
		{"set value too long", func(c *Config) { c.SetHeader = Header{Name: "x-auth", Value: secret} }, "l7.set_header.value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mod(&c)
			err := c.Validate()
			require.ErrorContains(t, err, tt.field, "Validate() = %v, want an error naming %s", err, tt.field)
			assert.NotContains(t, err.Error(), "s3cr3t", "Validate() = %v, shows the value", err)
		})
	}
}
