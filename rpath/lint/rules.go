package lint

import (
	"fmt"
	"strings"
)

// Severity orders findings: a run fails on findings at or above a level.
type Severity int

// Severity levels, lowest first.
const (
	Info Severity = iota + 1
	Warning
	Error
)

func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Error:
		return "error"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// MarshalText writes the level's name, so JSON shows "error", not 3.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a level's name.
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	if err == nil {
		*s = v
	}
	return err
}

// ParseSeverity reads "info", "warning" or "error" (any case; "warn" too).
func ParseSeverity(s string) (Severity, error) {
	switch strings.ToLower(s) {
	case "info", "note":
		return Info, nil
	case "warning", "warn":
		return Warning, nil
	case "error":
		return Error, nil
	}
	return 0, fmt.Errorf("unknown severity %q (want info, warning or error)", s)
}

// Rule describes one check. The ID never changes once released; the
// documentation lives in docs/lint.md under a heading with the ID.
type Rule struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Summary  string   `json:"summary"`
	Severity Severity `json:"severity"`
	// Default says whether the rule runs without being enabled.
	Default bool `json:"default"`
}

// DocURL is where the rules are documented; a rule's anchor is its ID in
// lower case.
const DocURL = "https://github.com/cudapatch/cudapatch/blob/main/docs/lint.md"

// HelpURI returns the documentation address of the rule.
func (r Rule) HelpURI() string { return DocURL + "#" + strings.ToLower(r.ID) }

// The rule IDs.
const (
	DriverLinkMissing  = "CP001"
	DriverShadowed     = "CP002"
	CompatAfterDriver  = "CP003"
	StubDir            = "CP004"
	BuildDirLeak       = "CP005"
	RelativeEntry      = "CP006"
	DuplicateEntry     = "CP007"
	RPathNotRunPath    = "CP008"
	UnresolvableNeeded = "CP009"
	InterpOutsideStore = "CP010"
	MissingDir         = "CP011"
	VerifyFailed       = "CP012"
	NoSearchPath       = "CP013"
	NoteStale          = "CP014"
	NoteNeeded         = "CP015"
	NoteStub           = "CP016"
	NoteOutsideStore   = "CP017"
	NoteMalformed      = "CP018"
	NoteUnloaded       = "CP019"
	NoteMissing        = "CP020"
	CompatTooOld       = "CP021"
	SymbolVersion      = "CP022"
	SymbolAtLoad       = "CP023"
	SymbolWhenCalled   = "CP024"
	MisreadEntry       = "CP025"
	CompatChoice       = "CP026"
)

// rules is the table of every rule, in ID order. It is never modified.
var rules = []Rule{
	{DriverLinkMissing, "driver-link-missing", "needs or dlopens an NVIDIA driver library, but the driver link is not in its search path", Error, true},
	{DriverShadowed, "driver-shadowed", "a search-path directory ahead of the driver link provides an NVIDIA driver library", Error, true},
	{CompatAfterDriver, "compat-after-driver", "the cuda_compat directory comes after the driver link, so it shadows nothing", Error, true},
	{StubDir, "stub-dir", "a directory of link-time stub libraries is in the search path", Error, true},
	{BuildDirLeak, "build-dir-leak", "a search-path entry points into the build directory", Error, true},
	{RelativeEntry, "relative-entry", "a search-path entry is empty or relative, so it depends on the current directory", Error, true},
	{DuplicateEntry, "duplicate-entry", "a search-path entry appears twice", Warning, true},
	{RPathNotRunPath, "rpath-not-runpath", "the search path is in DT_RPATH, not DT_RUNPATH", Warning, true},
	{UnresolvableNeeded, "unresolvable-needed", "a DT_NEEDED library cannot be found by the loader", Error, true},
	{InterpOutsideStore, "interp-outside-store", "a file under the store has an interpreter outside the store", Error, true},
	{MissingDir, "missing-dir", "a search-path directory does not exist", Warning, true},
	{VerifyFailed, "verify-failed", "the file breaks an invariant the loaders rely on", Error, true},
	{NoSearchPath, "no-search-path", "a dynamic file with dependencies has neither DT_RUNPATH nor DT_RPATH", Info, false},
	{NoteStale, "ldcache-stale", "the resolution-cache note gives a library other than what the search path now resolves", Error, true},
	{NoteNeeded, "ldcache-needed", "the resolution-cache note's names disagree with DT_NEEDED", Warning, true},
	{NoteStub, "ldcache-stub", "the resolution-cache note points into a directory of link-time stubs", Error, true},
	{NoteOutsideStore, "ldcache-outside-store", "the resolution-cache note names a file outside the store, or under the build directory", Error, true},
	{NoteMalformed, "ldcache-malformed", "the resolution-cache note is malformed, or the loader ignores it", Error, true},
	{NoteUnloaded, "ldcache-unloaded", "the resolution-cache note is in no PT_NOTE segment: the loader never reads it", Warning, true},
	{NoteMissing, "ldcache-missing", "a dynamic file with dependencies and a DT_RUNPATH has no resolution-cache note", Info, false},
	{CompatTooOld, "compat-older-than-driver", "a cuda_compat libcuda the loader takes is older than the target driver (--driver-version), or neither compat nor the driver can serve it: CUDA error 803", Error, false},
	{SymbolVersion, "symbol-version-missing", "a symbol version the file or its closure needs is not defined by the library the loader takes: it fails at load", Error, true},
	{SymbolAtLoad, "symbol-undefined-at-load", "a data symbol (or any symbol of an object bound now) that an executable's closure uses is defined nowhere in it: it fails at load", Error, true},
	{SymbolWhenCalled, "symbol-undefined-function", "a function that an executable's closure calls is defined nowhere in it: it fails when first called", Warning, true},
	{MisreadEntry, "misread-entry", "search-path entries spell a directory that exists, but the loader reads them otherwise (a ':' in its name splits it, a $LIB, $PLATFORM or $ORIGIN in it is expanded)", Error, true},
	{CompatChoice, "compat-choice", "which libcuda the cuda_compat selector first in the search path takes with the target driver (--driver-version), and why", Info, false},
}

// Rules returns every rule, in ID order.
func Rules() []Rule { return append([]Rule(nil), rules...) }

// RuleByID returns the rule with the given ID.
func RuleByID(id string) (Rule, bool) {
	for _, r := range rules {
		if r.ID == id {
			return r, true
		}
	}
	return Rule{}, false
}

// lookupRule accepts an ID (any case) or a rule name.
func lookupRule(s string) (Rule, bool) {
	for _, r := range rules {
		if strings.EqualFold(r.ID, s) || r.Name == s {
			return r, true
		}
	}
	return Rule{}, false
}
