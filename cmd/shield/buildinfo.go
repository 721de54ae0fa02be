package main

import (
	"runtime/debug"
)

// buildVersion fills what -ldflags -X left empty from the binary's build
// information: the main module's version ("(devel)" for a build from a
// checkout, a tag for `go install ...@v1.2.3`) and the VCS revision `go
// build` stamps from a git checkout, with "-dirty" when the tree had
// changes. "unknown" only where the build recorded nothing (go run, go
// test, -buildvcs=false).
func buildVersion(version, revision string) (string, string) {
	bi, ok := debug.ReadBuildInfo()
	return versionOf(bi, ok, version, revision)
}

func versionOf(bi *debug.BuildInfo, ok bool, version, revision string) (string, string) {
	if ok && version == "" && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	if ok && revision == "" {
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			revision = rev
		}
	}
	if version == "" {
		version = "unknown"
	}
	if revision == "" {
		revision = "unknown"
	}
	return version, revision
}
