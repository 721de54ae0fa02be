package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpshield/xdpshield/e2e"
	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/internal/testutil"
	shieldcfg "github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/pin"
)

// The documented example must stay a valid, complete configuration: every
// key it shows decodes, and it validates once given a token file.
func TestExampleConfig(t *testing.T) {
	t.Setenv(cli.EnvAdminDir, "") // TestMain's, for the services the tests start
	c, err := loadConfig(testutil.RepoFile(t, "../..", "docs/shield.example.toml"))
	require.NoError(t, err, "loadConfig(example)")
	_, err = c.validate()
	require.NoError(t, err, "example config invalid")
	def := defaultConfig()
	def.Iface = c.Iface
	// The example differs from the defaults it documents in none of these.
	const msg = "example config differs from the defaults it documents"
	assert.Equal(t, def.API, c.API, msg)
	assert.Equal(t, def.Limits, c.Limits, msg)
	assert.Equal(t, def.Log, c.Log, msg)
	assert.Equal(t, def.Mode, c.Mode, msg)
	assert.Equal(t, def.TableSize, c.TableSize, msg)
	assert.Equal(t, def.PinRoot, c.PinRoot, msg)
	assert.Equal(t, def.Clock, c.Clock, msg)
	assert.Equal(t, def.Lists.OwnAddressesSpoofed, c.Lists.OwnAddressesSpoofed, msg)
	assert.Equal(t, def.LB.Cgroup, c.LB.Cgroup, msg)
	assert.Equal(t, def.LB.ReverseSize, c.LB.ReverseSize, msg)
	assert.Empty(t, c.LB.Service, msg)
}

// TestExampleConfigSpellsLimits: the example spells every key of
// [limits] itself (decoded over nothing, not over the defaults), so a new
// setting cannot go undocumented.
func TestExampleConfigSpellsLimits(t *testing.T) {
	var c config
	_, err := toml.DecodeFile(testutil.RepoFile(t, "../..", "docs/shield.example.toml"), &c)
	require.NoError(t, err, "decode example")
	assert.Equal(t, shieldcfg.DefaultLimits(), c.Limits, "example [limits]: want every key")
}

// l7Conf is an [l7] section that validates; cases break one key of it.
const l7Conf = `[l7]
listen = "198.18.0.1:8080"
fast_path = "auto"
hash_header = "X-User"
[[l7.route]]
name = "api"
path_prefix = "/api"
backends = ["198.18.0.2:9001", "198.18.0.3:9001"]
[[l7.route]]
name = "web"
host = "www.example"
path_prefix = "/"
backends = ["198.18.0.2:9002"]
[[l7.rbac]]
name = "no-admin"
action = "deny"
methods = ["POST", "DELETE"]
path_prefix = "/api/admin"
[[l7.rbac]]
action = "deny"
source = "198.18.0.3/32"
header = "X-Role"
value = "guest"
[l7.set_header]
name = "X-Edge"
value = "shield"
`

// xdplbSection is a valid [xdplb] with one VIP: one backend drained, one
// weighted.
const xdplbSection = `[xdplb]
next_hop = "02:00:00:00:00:01"
source4 = "198.18.0.1"
[[xdplb.vip]]
addr = "198.18.0.100"
port = 80
proto = "tcp"
[[xdplb.vip.backend]]
addr = "198.18.0.10"
drain = true
[[xdplb.vip.backend]]
addr = "198.18.0.11"
weight = 2
`

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600)
	loose := filepath.Join(dir, "loose")
	os.WriteFile(loose, []byte("0123456789abcdef0123\n"), 0o644)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	cases := []struct {
		name, body, want string
	}{
		{"ok", `iface = "eth0"` + "\n[api]\ntoken_file = \"" + tok + "\"", ""},
		{"unknown key", "iface = \"eth0\"\ncolour = 1", "unknown keys: colour"},
		{"unknown nested key", "iface = \"eth0\"\n[limits]\nrte = 5", "unknown keys: limits.rte"},
		{"no iface", "", "iface: an interface is required"},
		{"rate 0", "iface = \"eth0\"\n[limits]\nrate = 0", "rate 0 out of range"},
		{"table 0", "iface = \"eth0\"\ntable_size = 0", "table_size: 0 out of range [1024, 16777216]"},
		{"table absurd", "iface = \"eth0\"\ntable_size = 5000000000", "table_size: 5000000000 out of range"},
		// Both ends of every range: accepted at the documented bound,
		// refused one past it.
		{"table min", "iface = \"eth0\"\ntable_size = 1024\n[api]\ntoken_file = \"" + tok + "\"", ""},
		{"table under min", "iface = \"eth0\"\ntable_size = 1023", "table_size: 1023 out of range [1024, 16777216]"},
		{"table max", "iface = \"eth0\"\ntable_size = 16777216\n[api]\ntoken_file = \"" + tok + "\"", ""},
		{"table over max", "iface = \"eth0\"\ntable_size = 16777217", "table_size: 16777217 out of range [1024, 16777216]"},
		{"table not a power of two", "iface = \"eth0\"\ntable_size = 1000000", "table_size: table size 1000000 is not a power of two (the table is 2^k sets of 4 sources): 524288 or 1048576"},
		{"limits max", "iface = \"eth0\"\n[limits]\nrate = 1000000000\nburst = 1000000000\nadmission_rate = 1000000000\nadmission_burst = 1000000000\n[api]\ntoken_file = \"" + tok + "\"", ""},
		{"rate over max", "iface = \"eth0\"\n[limits]\nrate = 1000000001", "rate 1000000001 out of range [1, 1000000000]"},
		{"burst over max", "iface = \"eth0\"\n[limits]\nburst = 1000000001", "burst 1000000001 out of range [1, 1000000000]"},
		{"body min", "iface = \"eth0\"\n[api]\nmax_body_bytes = 1024\ntoken_file = \"" + tok + "\"", ""},
		{"body under min", "iface = \"eth0\"\n[api]\nmax_body_bytes = 1023", "api.max_body_bytes: 1023 out of range [1024, 67108864]"},
		{"body max", "iface = \"eth0\"\n[api]\nmax_body_bytes = 67108864\ntoken_file = \"" + tok + "\"", ""},
		{"body over max", "iface = \"eth0\"\n[api]\nmax_body_bytes = 67108865", "api.max_body_bytes: 67108865 out of range [1024, 67108864]"},
		// Issue 10, finding 7: negative values as written, not 2^64-N.
		{"negative", "iface = \"eth0\"\n[limits]\nburst = -1", "limits.burst = -1"},
		{"negative table", "iface = \"eth0\"\ntable_size = -5", "table_size = -5"},
		// Issue 10, findings 6 and 7: the listen address is checked by
		// -check, and an exposed API needs protection.
		{"listen not a host", "iface = \"eth0\"\n[api]\nlisten = \"not-a-host:9470\"", `api.listen "not-a-host:9470"`},
		{"listen no port", "iface = \"eth0\"\n[api]\nlisten = \"127.0.0.1\"", `api.listen "127.0.0.1"`},
		{"exposed", "iface = \"eth0\"\n[api]\nlisten = \"0.0.0.0:9470\"", "beyond loopback"},
		{"exposed with token and auth_reads, no TLS", "iface = \"eth0\"\n[api]\nlisten = \"198.18.0.1:9470\"\nauth_reads = true\ntoken_file = \"" + tok + "\"", "TLS (api.tls_cert"},
		{"exposed, dangerously", "iface = \"eth0\"\n[api]\nlisten = \"0.0.0.0:9470\"\ndangerously_expose = true", ""},
		{"tls cert alone", "iface = \"eth0\"\n[api]\ntls_cert = \"/nonexistent\"", "give both or neither"},
		{"bad cidr", "iface = \"eth0\"\n[lists]\ndeny = [\"198.18.0.0/24\", \"198.18.0.999\"]", `lists.deny: "198.18.0.999"`},
		{"bad mode", "iface = \"eth0\"\nmode = \"fast\"", `unknown mode "fast"`},
		{"bad duration", "iface = \"eth0\"\n[api]\ntop_timeout = \"soon\"", "top_timeout"},
		{"loose token", "iface = \"eth0\"\n[api]\ntoken_file = \"" + loose + "\"", "mode 0644: others may read it"},
		{"short token", "iface = \"eth0\"\n[api]\ntoken_file = \"" + short + "\"", "shorter than 16"},
		{"missing token", "iface = \"eth0\"\n[api]\ntoken_file = \"" + dir + "/none\"", "open token file"},
		{"syntax", "iface = ", "config"},
		{"xdplb ok", "iface = \"eth0\"\n[api]\ntoken_file = \"" + tok + "\"\n" + xdplbSection, ""},
		{"xdplb bad mac", "iface = \"eth0\"\n" + strings.Replace(xdplbSection, "02:00:00:00:00:01", "02:00", 1), "next_hop"},
		{"xdplb family", "iface = \"eth0\"\n" + strings.Replace(xdplbSection, `addr = "198.18.0.11"`, `addr = "2001:db8::11"`, 1), "xdplb: vip 198.18.0.100:80/tcp: backend 2001:db8::11: not of the VIP's family"},
		{"xdplb all drained", "iface = \"eth0\"\n" + strings.Replace(xdplbSection, "weight = 2", "drain = true", 1), "no backend takes new flows"},
		{"chain ok", "iface = \"eth0\"\nchain = \"/sys/fs/bpf/mine/prog\"\n", ""},
		{"chain relative", "iface = \"eth0\"\nchain = \"mine/prog\"\n", "chain: \"mine/prog\" is not an absolute path"},
		{"dispatcher with chain", "iface = \"eth0\"\ndispatcher = true\nchain = \"/sys/fs/bpf/p\"\n", "dispatcher: chain is not used in dispatcher mode"},
		{"run priority zero", "iface = \"eth0\"\ndispatcher = true\nrun_priority = 0\n", "run_priority: 0 out of range [1, 2147483647]"},
		{"run priority too large", "iface = \"eth0\"\nrun_priority = 4294967296\n", "run_priority: 4294967296 out of range"},
		{"chain and xdplb", "iface = \"eth0\"\nchain = \"/sys/fs/bpf/mine/prog\"\n[api]\ntoken_file = \"" + tok + "\"\n" + xdplbSection, "both want the shield's one next program"},
		{"xdplb unknown key", "iface = \"eth0\"\n" + xdplbSection + "colour = 1\n", "unknown keys: xdplb.vip.backend.colour"},
		{"lb service", "iface = \"eth0\"\n[[lb.service]]\nvip = \"198.18.0.100\"\nport = 80\nbackends = [\"198.18.0.10:8080\"]", ""},
		{"lb zero backends", "iface = \"eth0\"\n[[lb.service]]\nvip = \"198.18.0.100\"\nport = 80", "lb.service[0]: service tcp/198.18.0.100:80: zero backends"},
		{"l7", "iface = \"eth0\"\n[api]\ntoken_file = \"" + tok + "\"\n" + l7Conf, ""},
		{"l7 no routes", "iface = \"eth0\"\n[l7]\nlisten = \"198.18.0.1:8080\"", "l7.route: at least one route is needed"},
		{"l7 no listen", "iface = \"eth0\"\n[[l7.route]]\nname = \"a\"\npath_prefix = \"/\"\nbackends = [\"198.18.0.2:80\"]", "l7.listen: empty"},
		{"l7 bad listen", "iface = \"eth0\"\n" + strings.Replace(l7Conf, "198.18.0.1:8080", "198.18.0.1", 1), `l7.listen: "198.18.0.1" is not IP:port`},
		{"l7 bad fast_path", "iface = \"eth0\"\n" + strings.Replace(l7Conf, `fast_path = "auto"`, `fast_path = "always"`, 1), `l7.fast_path: "always"`},
		{"l7 bad backend", "iface = \"eth0\"\n" + strings.Replace(l7Conf, "198.18.0.2:9001", "198.18.0.2", 1), `l7.route[0].backends[0]: "198.18.0.2" is not IP:port`},
		{"l7 bad action", "iface = \"eth0\"\n" + strings.Replace(l7Conf, `action = "deny"`, `action = "drop"`, 1), `l7.rbac[0].action: "drop"`},
		{"l7 bad method", "iface = \"eth0\"\n" + strings.Replace(l7Conf, `"POST"`, `"post"`, 1), `l7.rbac[0].methods[0]: "post"`},
		{"l7 hop-by-hop header set", "iface = \"eth0\"\n" + strings.Replace(l7Conf, `name = "X-Edge"`, `name = "Connection"`, 1), `l7.set_header.name: "Connection" frames the message`},
		{"l7 rule name twice", "iface = \"eth0\"\n" + l7Conf + "\n[[l7.rbac]]\nname = \"no-admin\"\naction = \"allow\"", `l7.rbac[2].name: "no-admin" used twice`},
		{"l7 unknown key", "iface = \"eth0\"\n" + strings.Replace(l7Conf, "path_prefix = \"/api\"", "prefix = \"/api\"", 1), "unknown keys: l7.route.prefix"},
		// Every problem at once, each naming its key.
		{"l7 two errors", "iface = \"eth0\"\n" + strings.Replace(strings.Replace(l7Conf, `action = "deny"`, `action = "drop"`, 1), "198.18.0.2:9001", "x", 1), "l7.route[0].backends[0]: \"x\" is not IP:port\nl7.rbac[0].action"},
		{"lb unknown key", "iface = \"eth0\"\n[[lb.service]]\nvip = \"198.18.0.100\"\nweight = 1", "unknown keys: lb.service.weight"},
		// Issue 29: the workbench, checked only when enabled.
		{"workbench", "iface = \"eth0\"\n[api]\ntoken_file = \"" + tok + "\"\n[workbench]\nenabled = true\ncredential_file = \"" + tok + "\"", ""},
		{"workbench off, bad values", "iface = \"eth0\"\n[api]\ntoken_file = \"" + tok + "\"\n[workbench]\nsession_ttl = \"1s\"", ""},
		{"workbench anonymous with auth_reads", "iface = \"eth0\"\n[api]\nauth_reads = true\ntoken_file = \"" + tok + "\"\n[workbench]\nenabled = true", "workbench.anonymous_view: the API needs the token to read"},
		{"workbench auth_reads, no anonymous", "iface = \"eth0\"\n[api]\nauth_reads = true\ntoken_file = \"" + tok + "\"\n[workbench]\nenabled = true\nanonymous_view = false", ""},
		{"workbench ttl", "iface = \"eth0\"\n[workbench]\nenabled = true\nsession_ttl = \"25h\"", "workbench.session_ttl: 25h0m0s out of range"},
		{"workbench storms", "iface = \"eth0\"\n[workbench]\nenabled = true\nstorms_per_hour = 0", "workbench.storms_per_hour: 0 out of range"},
		{"workbench phase", "iface = \"eth0\"\n[workbench]\nenabled = true\nstorm_phase = \"1m\"", "workbench.storm_phase: 1m0s out of range"},
		{"workbench timeout", "iface = \"eth0\"\n[workbench]\nenabled = true\nstorm_timeout = \"1s\"", "workbench.storm_timeout: 1s out of range"},
		{"workbench loose credential", "iface = \"eth0\"\n[workbench]\nenabled = true\ncredential_file = \"" + loose + "\"", "workbench.credential_file: token file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".toml")
			os.WriteFile(p, []byte(tc.body), 0o600)
			c, err := loadConfig(p)
			if err == nil {
				_, err = c.validate()
			}
			if tc.want == "" {
				assert.NoError(t, err, "config %q: %v, want no error", tc.body, err)
			} else {
				assert.ErrorContains(t, err, tc.want, "config %q: %v, want an error with %q", tc.body, err, tc.want)
			}
		})
	}
}

// The container lane's shield runs `shield serve -config` on the file
// e2e.ContainerShieldConfig writes (e2e/container.ShieldConfig): that file, read by the real loader, must
// configure exactly what the storm's service configuration says, every
// limit (the unprotected class's too), list, clock and mode.
func TestLaneConfigReadsBack(t *testing.T) {
	want := e2e.StormServiceConfig(e2e.ShortConfig(), "0123456789abcdef0123456789abcdef")
	want.Clock = shieldcfg.ClockKtime
	want.Mode = pin.ModeGeneric
	want.Limits.Unprotected = shieldcfg.ClassLimits{Rate: 4321, Burst: 8642, AdmissionRate: 99, AdmissionBurst: 77}
	want.Limits.KeyPrefix6 = 56
	want.Limits.DryRun = true
	dir := t.TempDir()
	path := filepath.Join(dir, "shield.toml")
	require.NoError(t, os.WriteFile(path, []byte(e2e.ContainerShieldConfig(want)), 0o600))
	c, err := loadConfig(path)
	require.NoError(t, err, "loadConfig(lane's file) = %v\n%s", err, e2e.ContainerShieldConfig(want))
	assert.Equal(t, "/etc/xdpshield/token", c.API.TokenFile, "token_file = %q, want the container's /etc/xdpshield/token", c.API.TokenFile)
	c.API.TokenFile = filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(c.API.TokenFile, []byte(want.API.Token+"\n"), 0o600))
	s, err := c.validate()
	require.NoError(t, err, "lane's file invalid")
	assert.True(t, s.limits.Equal(want.Limits), "limits = %+v, want %+v", s.limits, want.Limits)
	assert.Equal(t, want.Limits, s.limits, "limits")
	assert.Equal(t, want.Allow, s.allow, "allow")
	assert.Equal(t, want.Deny, s.deny, "deny")
	assert.Equal(t, want.Clock, s.clock, "clock")
	assert.Equal(t, want.Mode, s.mode, "mode")
	assert.Equal(t, want.Iface, c.Iface, "iface")
	assert.Equal(t, uint64(want.TableSize), c.TableSize, "table_size")
	assert.Equal(t, want.SpoofOwnAddresses, c.Lists.OwnAddressesSpoofed, "own_addresses_spoofed")
}
