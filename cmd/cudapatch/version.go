package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set at build time (nix/package.nix: -X main.version=…); when
// it is not, buildVersion reads the version from the build information.
var version = ""

// versionInfo is what --version prints.
type versionInfo struct {
	Version  string // 0.1.0, v0.1.0, v0.0.0-20260102150405-9b977c2d1a2b+dirty, or devel
	Commit   string // the VCS revision, "" when unknown
	Modified bool   // the work tree had uncommitted changes
	Date     string // the commit's date, 2026-11-22; "" when unknown
	Go       string // go1.26.0 linux/amd64
}

// buildVersion decides the version: the -X main.version value, else the
// main module's version (`go install …@v0.1.0`, or the pseudo-version Go
// stamps from the VCS since Go 1.24), else "devel"; the commit and dirty
// flag come from the VCS settings Go records in a checkout.
func buildVersion(ldflags string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: ldflags, Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		v.Go = bi.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			case "vcs.time":
				v.Date, _, _ = strings.Cut(s.Value, "T")
			}
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
}

// hostVersion is the version of this binary.
func hostVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildVersion(version, bi)
}

func (v versionInfo) write(w io.Writer) error {
	commit := "unknown (built without version control information)"
	if v.Commit != "" {
		commit = v.Commit
		if v.Modified {
			commit += " (with uncommitted changes)"
		}
	}
	_, err := fmt.Fprintf(w, "cudapatch %s\ncommit %s\n%s\n", v.Version, commit, v.Go)
	return err
}
