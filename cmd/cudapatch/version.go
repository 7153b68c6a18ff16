package main

import (
	"fmt"
	"io"
	"regexp"
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
	if v.Commit == "" {
		// `go install …@<pseudo-version>` builds from a module zip, which
		// has no VCS information; the version names the commit.
		if m := pseudoVersion.FindStringSubmatch(v.Version); m != nil {
			v.Commit = m[2]
			v.Date = m[1][0:4] + "-" + m[1][4:6] + "-" + m[1][6:8]
			v.Modified = m[3] == "+dirty"
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
}

// pseudoVersion matches a Go pseudo-version's timestamp and commit prefix
// (v0.0.0-20261122191557-5d1c941239c8, v1.2.4-0.20261122191557-…,
// v1.2.3-pre.0.20261122191557-…), with an optional +dirty or other build
// suffix.
var pseudoVersion = regexp.MustCompile(`[-.]([0-9]{14})-([0-9a-f]{12})(\+[0-9A-Za-z.+-]+)?$`)

// hostVersion is the version of this binary.
func hostVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildVersion(version, bi)
}

func (v versionInfo) write(w io.Writer) error {
	commit := "unknown (built without version control information)"
	if v.Commit != "" {
		var notes []string
		if v.Date != "" {
			notes = append(notes, v.Date)
		}
		if v.Modified {
			notes = append(notes, "with uncommitted changes")
		}
		commit = v.Commit
		if len(notes) > 0 {
			commit += " (" + strings.Join(notes, ", ") + ")"
		}
	}
	_, err := fmt.Fprintf(w, "cudapatch %s\ncommit %s\n%s\n", v.Version, commit, v.Go)
	return err
}
