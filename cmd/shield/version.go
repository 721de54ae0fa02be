package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strings"
)

func init() {
	commands["version"] = command{"print the version, VCS revision and Go version (also --version)", runVersion}
}

// versionInfo is what `shield version -json` prints: the same version and
// revision shield_build_info carries (buildinfo.go).
type versionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Dirty    bool   `json:"dirty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func currentVersion() versionInfo {
	return versionInfo{
		Version:  version,
		Revision: strings.TrimSuffix(revision, "-dirty"),
		Dirty:    strings.HasSuffix(revision, "-dirty"),
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func runVersion(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version: unexpected arguments %q", fs.Args())
	}
	v := currentVersion()
	if *asJSON {
		return printJSON(v)
	}
	dirty := ""
	if v.Dirty {
		dirty = " (modified tree)"
	}
	_, err := fmt.Fprintf(stdout, "shield %s, revision %s%s, %s %s\n", v.Version, v.Revision, dirty, v.Go, v.Platform)
	return err
}
