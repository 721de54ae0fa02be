package cli

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strings"
)

// VersionInfo is what `shield version -json` prints: the same version and
// revision shield_build_info carries (Env.Version, Env.Revision).
type VersionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Dirty    bool   `json:"dirty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func (e *Env) versionInfo() VersionInfo {
	return VersionInfo{
		Version:  e.Version,
		Revision: strings.TrimSuffix(e.Revision, "-dirty"),
		Dirty:    strings.HasSuffix(e.Revision, "-dirty"),
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func runVersion(_ context.Context, e *Env, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := e.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("version: unexpected arguments %q", fs.Args())
	}
	v := e.versionInfo()
	if *asJSON {
		return e.PrintJSON(v)
	}
	dirty := ""
	if v.Dirty {
		dirty = " (modified tree)"
	}
	_, err := fmt.Fprintf(e.Stdout, "shield %s, revision %s%s, %s %s\n", v.Version, v.Revision, dirty, v.Go, v.Platform)
	return err
}
