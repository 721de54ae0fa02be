package serve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"

	shieldcfg "github.com/xdpshield/xdpshield/shield/config"
	"github.com/xdpshield/xdpshield/workbench"
)

// keyPos is where a key is written in the configuration file.
type keyPos struct{ line, col int }

var (
	tomlHeader = regexp.MustCompile(`^\s*\[\[?\s*([^\]]+?)\s*\]\]?`)
	tomlKey    = regexp.MustCompile(`^(\s*)([A-Za-z0-9_\-."' ]+?)\s*=`)
)

// keyLines maps each key of the TOML file at path, dotted from the root
// ("api.listen", "lb.service"), to where it is first written: enough to
// point at the line of a key the validation refuses. BurntSushi/toml
// keeps the positions it knows private, so this reads the file's lines:
// table headers and `key =` lines; a value spanning lines (a multi-line
// array or string) is skipped over only as far as its lines do not look
// like keys.
func keyLines(path string) map[string]keyPos {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	pos := map[string]keyPos{}
	add := func(k string, p keyPos) {
		if _, ok := pos[k]; !ok {
			pos[k] = p
		}
	}
	// table is the current table; elem, in an array of tables, is the
	// element ("lb.service[1]", as the validation names it).
	table, elem := "", ""
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := tomlHeader.FindStringSubmatchIndex(line); m != nil {
			table, elem = unquoteKey(line[m[2]:m[3]]), ""
			p := keyPos{n, m[2] + 1}
			add(table, p)
			if strings.HasPrefix(strings.TrimSpace(line), "[[") {
				elem = fmt.Sprintf("%s[%d]", table, count[table])
				count[table]++
				add(elem, p)
			}
			continue
		}
		if m := tomlKey.FindStringSubmatchIndex(line); m != nil {
			k := unquoteKey(line[m[4]:m[5]])
			p := keyPos{n, m[4] + 1}
			if elem != "" {
				add(elem+"."+k, p)
			}
			if table != "" {
				k = table + "." + k
			}
			add(k, p)
		}
	}
	return pos
}

func unquoteKey(k string) string {
	parts := strings.Split(k, ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}

// configError names the file, line and column of a TOML syntax error.
func configError(path string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.LastKey != "" {
			msg += fmt.Sprintf(" (after key %s)", pe.LastKey)
		}
		return fmt.Errorf("config %s:%d:%d: %s", path, pe.Position.Line, pe.Position.Col, msg)
	}
	return fmt.Errorf("config %s: %w", path, err)
}

// at prefixes msg with path:line:col of key, or of its nearest written
// parent ("lb.service" for "lb.service.mode"), if the file has it.
func at(pos map[string]keyPos, path, key, msg string) string {
	for k := key; k != ""; {
		if p, ok := pos[k]; ok {
			return fmt.Sprintf("%s:%d:%d: %s", path, p.line, p.col, msg)
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return msg
}

// lineOf is " (line L, column C)" of key (or its nearest written
// parent), "" if the file does not have it: for lists of keys.
func lineOf(pos map[string]keyPos, key string) string {
	if p, ok := pos[key]; ok {
		return fmt.Sprintf(" (line %d, column %d)", p.line, p.col)
	}
	return ""
}

// placeErrors prefixes each problem validate reports ("key: message",
// "key VALUE is ...")
// with where the file sets that key; keys set by a flag (fromFlag) or
// left at their default keep no position.
func placeErrors(path string, err error, fromFlag map[string]bool) error {
	if path == "" {
		return err
	}
	pos := keyLines(path)
	var out []error
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		// One problem a line (the sections join theirs); the key opens
		// it: "key: ..." or "key VALUE ...".
		lines := strings.Split(e.Error(), "\n")
		for i, msg := range lines {
			key := msg
			if j := strings.IndexAny(msg, ": "); j >= 0 {
				key = msg[:j]
			}
			if !fromFlag[key] {
				lines[i] = at(pos, path, key, msg)
			}
		}
		out = append(out, errors.New(strings.Join(lines, "\n")))
	}
	return errors.Join(out...)
}

// printCheck is `serve -check`'s summary of a valid configuration: what
// serve would run with, one setting a line.
func printCheck(w io.Writer, path string, cfg config, set settings) {
	src := "defaults and flags"
	if path != "" {
		src = path
	}
	onOff := map[bool]string{true: "on", false: "off"}
	fmt.Fprintf(w, "configuration OK (%s)\n", src)
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "  %-16s %s\n", k, fmt.Sprintf(format, a...)) }
	row("iface", "%s", cfg.Iface)
	row("mode", "%s", set.mode)
	if cfg.Dispatcher {
		row("dispatcher", "libxdp's, run priority %d", cfg.RunPriority)
	}
	row("table", "%d sources", cfg.TableSize)
	row("clock", "%s", cfg.Clock)
	row("pin root", "%s", cfg.PinRoot)
	scheme := "http"
	if cfg.API.TLSCert != "" {
		scheme = "https"
	}
	row("api", "%s://%s, reads need the token %s", scheme, cfg.API.Listen, onOff[cfg.API.AuthReads])
	row("token", "%s", tokenState(cfg.API.TokenFile))
	row("admin dir", "%s", cfg.API.AdminDir)
	l := set.limits
	if l.Unprotected == (shieldcfg.ClassLimits{}) {
		l.Unprotected = shieldcfg.DefaultUnprotected()
	}
	if l.KeyPrefix4 == 0 {
		l.KeyPrefix4 = shieldcfg.DefaultKeyPrefix4
	}
	if l.KeyPrefix6 == 0 {
		l.KeyPrefix6 = shieldcfg.DefaultKeyPrefix6
	}
	row("limits", "rate %d/s burst %d, admission %d/s burst %d, dry-run %s", l.Rate, l.Burst, l.AdmissionRate, l.AdmissionBurst, onOff[l.DryRun])
	if len(l.Protected) == 0 {
		row("protected", "every packet")
	} else {
		var ds []string
		for _, d := range l.Protected {
			ds = append(ds, d.String())
		}
		u := l.Unprotected
		row("protected", "%s", strings.Join(ds, ", "))
		row("return traffic", "rate %d/s burst %d, admission %d/s burst %d", u.Rate, u.Burst, u.AdmissionRate, u.AdmissionBurst)
	}
	row("keyed by", "IPv4 /%d, IPv6 /%d", l.KeyPrefix4, l.KeyPrefix6)
	if len(l.Aggregates) > 0 {
		var as []string
		for _, a := range l.Aggregates {
			as = append(as, fmt.Sprintf("%s %d/s burst %d", a.Destination, a.Rate, a.Burst))
		}
		row("aggregates", "%s (established sources first)", strings.Join(as, ", "))
	}
	row("allow list", "%d prefixes", len(set.allow))
	row("deny list", "%d prefixes", len(set.deny))
	row("own addresses", "spoofed from outside: %s", map[bool]string{true: "dropped", false: "not checked"}[cfg.Lists.OwnAddressesSpoofed])
	row("lb services", "%d", len(cfg.LB.Service))
	row("xdplb vips", "%d", len(cfg.XDPLB.VIPs))
	if cfg.Chain != "" {
		row("chain", "passed frames go on to %s", cfg.Chain)
	}
	if cfg.L7.Enabled() {
		row("l7", "%s, %d routes, %d rbac rules", cfg.L7.Listen, len(cfg.L7.Routes), len(cfg.L7.RBAC))
	} else {
		row("l7", "off")
	}
	if w := cfg.Workbench; w.Enabled {
		storms := "storms with " + w.Shieldlab
		if lab, err := workbench.FindLab(w.Shieldlab); err != nil {
			storms = "no storms: " + err.Error()
		} else if w.Shieldlab == "" {
			storms = "storms with " + lab
		}
		row("workbench", "%s://%s%s, read-only view %s, sessions %s; %s", scheme, cfg.API.Listen, workbench.Prefix,
			onOff[w.AnonymousView], w.SessionTTL.Duration, storms)
	} else {
		row("workbench", "off")
	}
	row("log", "%s, %s", cfg.Log.Level, cfg.Log.Format)
}
