package serve

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/xdpshield/xdpshield/api"
	"github.com/xdpshield/xdpshield/internal/cli"
	"github.com/xdpshield/xdpshield/l7/policy"
	"github.com/xdpshield/xdpshield/lb/lbconf"
	svc "github.com/xdpshield/xdpshield/service"
	"github.com/xdpshield/xdpshield/shield"
	shieldcfg "github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/shield/lists"
	"github.com/xdpshield/xdpshield/shield/pin"
	"github.com/xdpshield/xdpshield/workbench"
	"github.com/xdpshield/xdpshield/xdplb"
)

// config is the service's configuration file (TOML; docs/shield.example.toml
// documents every key). Flags given to serve override it.
type config struct {
	Iface     string `toml:"iface"`
	Mode      string `toml:"mode"`
	PinRoot   string `toml:"pin_root"`
	TableSize uint64 `toml:"table_size"` // uint64, so a too large value is reported as written
	Clock     string `toml:"clock"`
	// Chain is a pinned XDP program the shield passes frames on to
	// (service.Config.Chain).
	Chain string `toml:"chain"`
	// Dispatcher runs the shield as one program of libxdp's dispatcher
	// (pin.AttachOptions.Dispatcher), at RunPriority.
	Dispatcher  bool   `toml:"dispatcher"`
	RunPriority uint64 `toml:"run_priority"` // uint64, so a too large value is reported as written

	API struct {
		Listen       string   `toml:"listen"`
		TokenFile    string   `toml:"token_file"`
		AuthReads    bool     `toml:"auth_reads"`
		MaxBodyBytes int64    `toml:"max_body_bytes"`
		TopTimeout   duration `toml:"top_timeout"`
		TLSCert      string   `toml:"tls_cert"`
		TLSKey       string   `toml:"tls_key"`
		// DangerouslyExpose serves a non-loopback address without
		// auth_reads or TLS; refused otherwise.
		DangerouslyExpose bool `toml:"dangerously_expose"`
		// AdminDir holds the admin socket the CLI uses locally.
		AdminDir string `toml:"admin_dir"`
	} `toml:"api"`

	// Limits is the shield's own type: the file's [limits] table decodes
	// straight into it, and shieldcfg.Limits.Validate is its one check.
	Limits shieldcfg.Limits `toml:"limits"`

	Lists struct {
		OwnAddressesSpoofed bool     `toml:"own_addresses_spoofed"`
		Allow               []string `toml:"allow"`
		Deny                []string `toml:"deny"`
	} `toml:"lists"`

	Log struct {
		Level  string `toml:"level"`
		Format string `toml:"format"`
	} `toml:"log"`

	// LB is the socket balancer ([lb], [[lb.service]]; lbconf.Config).
	LB lbconf.Config `toml:"lb"`

	// L7 is the L7 proxy and its fast path ([l7], [[l7.route]],
	// [[l7.rbac]], [l7.set_header]; policy.Section). None when absent.
	L7 policy.Section `toml:"l7"`

	// XDPLB is the XDP balancer behind the shield ([xdplb],
	// [[xdplb.vip]], [[xdplb.vip.backend]]; xdplb.Config). None without
	// VIPs.
	XDPLB xdplb.Config `toml:"xdplb"`
	// Workbench is the live page (docs/workbench.md); off by default.
	Workbench struct {
		Enabled bool `toml:"enabled"`
		// CredentialFile holds a sign-in secret for the page besides
		// the operator token (mode 0600, as the token file).
		CredentialFile string `toml:"credential_file"`
		// AnonymousView shows the live counters without signing in.
		AnonymousView bool     `toml:"anonymous_view"`
		SessionTTL    duration `toml:"session_ttl"`
		// Shieldlab is the lab binary storms run with (default: beside
		// shield, else in PATH).
		Shieldlab     string   `toml:"shieldlab"`
		StormsPerHour int      `toml:"storms_per_hour"`
		StormPhase    duration `toml:"storm_phase"`
		StormTimeout  duration `toml:"storm_timeout"`
	} `toml:"workbench"`
}

// duration reads "5s"-style TOML strings.
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// defaultConfig is what serve runs with when neither file nor flag says
// otherwise: safe by default.
func defaultConfig() config {
	var c config
	c.Mode = "auto"
	c.RunPriority = pin.DefaultRunPrio
	c.PinRoot = pin.DefaultPinRoot
	c.TableSize = shield.DefaultTableSize
	c.Clock = "jiffies"
	c.API.Listen = api.DefaultListen
	c.API.MaxBodyBytes = api.DefaultMaxBody
	c.API.TopTimeout = duration{api.DefaultTopTimeout}
	c.API.AdminDir = svc.DefaultAdminDir
	if d := os.Getenv(cli.EnvAdminDir); d != "" {
		c.API.AdminDir = d
	}
	c.Limits = shieldcfg.DefaultLimits()
	c.Lists.OwnAddressesSpoofed = true
	c.Log.Level = "info"
	c.Log.Format = "text"
	c.LB = lbconf.DefaultConfig()
	c.Workbench.AnonymousView = true
	c.Workbench.SessionTTL = duration{workbench.DefaultSessionTTL}
	c.Workbench.StormsPerHour = workbench.DefaultPerHour
	c.Workbench.StormPhase = duration{workbench.DefaultStormPhase}
	c.Workbench.StormTimeout = duration{workbench.DefaultStormTimeout}
	return c
}

// loadConfig reads path over the defaults; unknown keys are errors.
func loadConfig(path string) (config, error) {
	c := defaultConfig()
	if path == "" {
		return c, nil
	}
	md, err := toml.DecodeFile(path, &c)
	if err != nil {
		return c, configError(path, err)
	}
	pos := keyLines(path)
	// Unsigned fields would take -1 as 2^64-1 and report that: name the
	// negative values as written instead.
	var raw map[string]any
	if _, err := toml.DecodeFile(path, &raw); err == nil {
		if neg := negatives("", raw); len(neg) > 0 {
			for i, n := range neg {
				k, _, _ := strings.Cut(n, " = ")
				neg[i] = n + lineOf(pos, k)
			}
			return c, fmt.Errorf("config %s: negative values: %s", path, strings.Join(neg, ", "))
		}
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String() + lineOf(pos, k.String())
		}
		return c, fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(keys, ", "))
	}
	return c, nil
}

// negatives lists the keys of m (recursively) holding negative integers,
// as key = value.
func negatives(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		switch v := v.(type) {
		case int64:
			if v < 0 {
				out = append(out, fmt.Sprintf("%s%s = %d", prefix, k, v))
			}
		case map[string]any:
			out = append(out, negatives(prefix+k+".", v)...)
		}
	}
	slices.Sort(out)
	return out
}

// settings is a validated configuration, in the types the service uses.
type settings struct {
	mode   pin.Mode
	clock  shieldcfg.Clock
	limits shieldcfg.Limits
	allow  []netip.Prefix
	deny   []netip.Prefix
	token  string
	// credential is the workbench's own sign-in secret.
	credential string
}

var clocks = map[string]shieldcfg.Clock{"jiffies": shieldcfg.ClockJiffies, "ktime": shieldcfg.ClockKtime}

// validate checks the whole configuration and reports every problem.
func (c *config) validate() (settings, error) {
	var s settings
	var errs []error
	if c.Iface == "" {
		errs = append(errs, errors.New("iface: an interface is required (-iface or iface =)"))
	}
	var err error
	if s.mode, err = pin.ParseMode(c.Mode); err != nil {
		errs = append(errs, fmt.Errorf("mode: %w", err))
	}
	var ok bool
	if s.clock, ok = clocks[c.Clock]; !ok {
		errs = append(errs, fmt.Errorf("clock: unknown clock %q (want jiffies or ktime)", c.Clock))
	}
	if c.TableSize < 1024 || c.TableSize > shield.MaxTableSize {
		errs = append(errs, fmt.Errorf("table_size: %d out of range [1024, %d]", c.TableSize, shield.MaxTableSize))
	} else if err := shield.CheckTableSize(uint32(c.TableSize)); err != nil {
		errs = append(errs, fmt.Errorf("table_size: %w", err))
	}
	if c.PinRoot == "" {
		errs = append(errs, errors.New("pin_root: empty"))
	}
	if c.API.Listen == "" {
		errs = append(errs, errors.New("api.listen: empty"))
	}
	if c.API.AdminDir == "" || !filepath.IsAbs(c.API.AdminDir) {
		errs = append(errs, fmt.Errorf("api.admin_dir: %q is not an absolute path", c.API.AdminDir))
	}
	if c.API.MaxBodyBytes < 1024 || c.API.MaxBodyBytes > 64<<20 {
		errs = append(errs, fmt.Errorf("api.max_body_bytes: %d out of range [1024, %d]", c.API.MaxBodyBytes, 64<<20))
	}
	if c.API.TopTimeout.Duration <= 0 || c.API.TopTimeout.Duration > time.Minute {
		errs = append(errs, fmt.Errorf("api.top_timeout: %s out of range (0, 1m]", c.API.TopTimeout.Duration))
	}
	s.limits = c.Limits
	// The check serve's load makes (the jiffies clock's tick included):
	// -check passes nothing serve refuses.
	if ok {
		err = shield.CheckLimits(s.limits, s.clock)
	} else {
		err = s.limits.Validate()
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("limits: %s", strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	if s.allow, err = lists.ParsePrefixes(c.Lists.Allow); err != nil {
		errs = append(errs, fmt.Errorf("lists.allow: %s", strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	if s.deny, err = lists.ParsePrefixes(c.Lists.Deny); err != nil {
		errs = append(errs, fmt.Errorf("lists.deny: %s", strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: unknown level %q (want debug, info, warn or error)", c.Log.Level))
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		errs = append(errs, fmt.Errorf("log.format: unknown format %q (want text or json)", c.Log.Format))
	}
	if _, err := c.LB.Services(); err != nil {
		errs = append(errs, err)
	}
	if err := c.L7.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.XDPLB.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("xdplb: %s", strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	switch {
	case c.Chain == "":
	case !filepath.IsAbs(c.Chain):
		errs = append(errs, fmt.Errorf("chain: %q is not an absolute path (a program pinned in bpffs)", c.Chain))
	case len(c.XDPLB.VIPs) > 0:
		errs = append(errs, fmt.Errorf("chain: %s and [xdplb] VIPs both want the shield's one next program; use one", c.Chain))
	}
	// In the dispatcher the next program is the dispatcher's next
	// component; the shield's own `next` would be an extension's
	// program array, which kernels before 5.19 keep for extensions.
	if c.Dispatcher && c.Chain != "" {
		errs = append(errs, errors.New("dispatcher: chain is not used in dispatcher mode; load the program into the dispatcher at a run priority above run_priority (xdp-loader load -P PRIORITY) instead"))
	}
	if c.Dispatcher && len(c.XDPLB.VIPs) > 0 {
		errs = append(errs, errors.New("dispatcher: [xdplb] VIPs are not served in dispatcher mode (the balancer rides the shield's own next program)"))
	}
	if c.RunPriority < 1 || c.RunPriority > 1<<31-1 {
		errs = append(errs, fmt.Errorf("run_priority: %d out of range [1, %d]", c.RunPriority, 1<<31-1))
	}
	if c.API.TokenFile != "" {
		if s.token, err = readServiceTokenFile(c.API.TokenFile); err != nil {
			errs = append(errs, fmt.Errorf("api.token_file: %w", err))
		}
	}
	if err := c.validateWorkbench(&s); err != nil {
		errs = append(errs, err)
	}
	// What the service checks before it binds or attaches anything: the
	// address, and that an exposed API is protected.
	if err := svc.ValidateAPI(c.apiConfig(s.token)); err != nil {
		errs = append(errs, err)
	}
	return s, errors.Join(errs...)
}

// apiConfig is the service's API configuration.
func (c *config) apiConfig(token string) svc.API {
	return svc.API{
		Listen:            c.API.Listen,
		Token:             token,
		TokenSource:       c.API.TokenFile,
		AuthReads:         c.API.AuthReads,
		MaxBody:           c.API.MaxBodyBytes,
		TopTimeout:        c.API.TopTimeout.Duration,
		TLSCert:           c.API.TLSCert,
		TLSKey:            c.API.TLSKey,
		DangerouslyExpose: c.API.DangerouslyExpose,
		AdminDir:          c.API.AdminDir,
	}
}

// readServiceTokenFile reads the service's token file (or the
// workbench's credential): as the CLI reads its own, and the file must
// also belong to the user the service runs as, or another user wrote the
// token it accepts (issue 23, finding 9).
func readServiceTokenFile(path string) (string, error) {
	return cli.ReadToken(path, true)
}

// validateWorkbench checks [workbench] (only when enabled: a disabled
// section changes nothing) and reads its credential.
func (c *config) validateWorkbench(s *settings) error {
	w := &c.Workbench
	if !w.Enabled {
		return nil
	}
	var errs []error
	if w.AnonymousView && c.API.AuthReads {
		errs = append(errs, errors.New("workbench.anonymous_view: the API needs the token to read (api.auth_reads); the page would show without one what the API does not: set anonymous_view = false"))
	}
	if w.SessionTTL.Duration < time.Minute || w.SessionTTL.Duration > 24*time.Hour {
		errs = append(errs, fmt.Errorf("workbench.session_ttl: %s out of range [1m, 24h]", w.SessionTTL.Duration))
	}
	if w.StormsPerHour < 1 || w.StormsPerHour > 60 {
		errs = append(errs, fmt.Errorf("workbench.storms_per_hour: %d out of range [1, 60]", w.StormsPerHour))
	}
	if w.StormPhase.Duration < time.Second || w.StormPhase.Duration > 30*time.Second {
		errs = append(errs, fmt.Errorf("workbench.storm_phase: %s out of range [1s, 30s]", w.StormPhase.Duration))
	}
	if w.StormTimeout.Duration < 10*time.Second || w.StormTimeout.Duration > 15*time.Minute {
		errs = append(errs, fmt.Errorf("workbench.storm_timeout: %s out of range [10s, 15m]", w.StormTimeout.Duration))
	}
	if w.CredentialFile != "" {
		var err error
		if s.credential, err = readServiceTokenFile(w.CredentialFile); err != nil {
			errs = append(errs, fmt.Errorf("workbench.credential_file: %w", err))
		}
	}
	return errors.Join(errs...)
}

// workbenchConfig is the service's workbench configuration.
func (c *config) workbenchConfig(credential string) svc.Workbench {
	w := c.Workbench
	return svc.Workbench{Enabled: w.Enabled, Config: workbench.Config{
		Credential:  credential,
		NoAnonymous: !w.AnonymousView,
		SessionTTL:  w.SessionTTL.Duration,
		Storm: workbench.StormConfig{Binary: w.Shieldlab, PerHour: w.StormsPerHour,
			Phase: w.StormPhase.Duration, Timeout: w.StormTimeout.Duration},
	}}
}
