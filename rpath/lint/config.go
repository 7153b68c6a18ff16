package lint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/cudapatch/cudapatch/rpath/fnmatch"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// ConfigFile is the name of the configuration file Lint reads at the root
// of each directory it is given (unless Options.Rules supplies one).
const ConfigFile = ".cudapatch-lint.json"

// Config is the content of a configuration file:
//
//	{
//	  "enable":   ["CP013"],
//	  "disable":  ["CP008"],
//	  "severity": {"CP007": "error"},
//	  "ignore":   [{"rules": ["CP009"], "paths": ["lib/python*/**/*.so"]}]
//	}
//
// Rules are named by ID or name. Ignore paths are doublestar globs ("**"
// crosses directories) matched against the file's path relative to the
// tree root, with '/' separators; an ignore entry without rules silences
// every rule for its paths.
type Config struct {
	Enable   []string            `json:"enable,omitempty"`
	Disable  []string            `json:"disable,omitempty"`
	Severity map[string]Severity `json:"severity,omitempty"`
	Ignore   []Ignore            `json:"ignore,omitempty"`
}

// Ignore silences rules for paths.
type Ignore struct {
	Rules []string `json:"rules,omitempty"`
	Paths []string `json:"paths"`
}

// Validate rejects unknown rules and malformed globs.
func (c *Config) Validate() error {
	var errs []error
	known := func(id string) {
		if _, ok := lookupRule(id); !ok && id != "all" {
			errs = append(errs, fmt.Errorf("unknown rule %q", id))
		}
	}
	for _, id := range c.Enable {
		known(id)
	}
	for _, id := range c.Disable {
		known(id)
	}
	for id := range c.Severity {
		known(id)
	}
	for i, ig := range c.Ignore {
		for _, id := range ig.Rules {
			known(id)
		}
		if len(ig.Paths) == 0 {
			errs = append(errs, fmt.Errorf("ignore[%d]: no paths", i))
		}
		for _, p := range ig.Paths {
			if !doublestar.ValidatePattern(p) {
				errs = append(errs, fmt.Errorf("ignore[%d]: bad glob %q", i, p))
			}
		}
	}
	return errors.Join(errs...)
}

// ParseConfig reads a configuration from JSON; unknown fields are errors,
// so a misspelt key does not silently do nothing.
func ParseConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// LoadConfig reads a configuration file. Errors name the file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Options configures Lint. It is a plain struct whose zero fields mean
// their defaults, stated on each. It is named Options, not Config: Config
// is the content of a .cudapatch-lint.json file, a format of its own that
// Options.Rules can stand in for.
type Options struct {
	// Policy is what the main job was asked, in the struct the main job
	// takes (patch.Config.Policy), so that lint is given the same values
	// under the same names. Lint reads:
	//   - Interpreter: the main job's interpreter file (a path on this
	//     machine, not inside Root): the files it skips for their
	//     architecture or OS ABI are skipped too, with the same reason
	//     (policy.SkipReason). With neither it nor Target, only files of
	//     a kind the main job never patches (static, not ELF…) are
	//     skipped.
	//   - DriverLink: the driver link (default policy.DefaultDriverLink);
	//     its -32 twin counts too.
	//   - PreserveOrigin, AppendRunpaths and RuntimeDeps: the old $ORIGIN
	//     entries and the entries the main job put in verbatim (nixpkgs
	//     adds DEP/lib whether it exists or not) are no findings of CP011
	//     missing-dir, also where the main job made them relative.
	//   - IgnoreMissing: a DT_NEEDED library whose base name matches one
	//     is no finding of CP009 unresolvable-needed.
	//   - BuildDirs: directories whose appearance in a search path is a
	//     build-directory leak besides /build and /tmp, such as
	//     $NIX_BUILD_TOP ("" and "/" are passed over).
	// Its other fields are not read.
	Policy policy.Config
	// Target is the main job's architecture, given directly; set, it
	// stands for the architecture Policy.Interpreter would be read for.
	Target *policy.Target

	// Root resolves every absolute path (search directories, DT_NEEDED,
	// the interpreter) inside this directory, as if the files ran
	// chrooted there; the paths given to Lint must then lie under it.
	// "" resolves them on this machine.
	Root string
	// StoreDir is the Nix store directory (absolute); "" means
	// /nix/store.
	StoreDir string

	// Enable turns rules on (by ID or name; "all" for every rule). It
	// overrides the configuration files.
	Enable []string
	// Disable turns rules off (by ID or name; "all" for every rule). It
	// overrides the configuration files and Enable.
	Disable []string
	// Rules is the configuration used for every tree; nil reads each
	// tree's own ConfigFile.
	Rules *Config
	// DriverVersion names the NVIDIA driver (580.159.04) the files are
	// to run with, and turns on CP021 compat-older-than-driver, which
	// compares with it the libcuda of each cuda_compat directory the
	// loader would take: an older one fails with CUDA error 803 there.
	// "" leaves CP021 nothing to compare with.
	DriverVersion string

	// Jobs is how many files are checked at once; 0 means
	// runtime.NumCPU().
	Jobs int
	// Logger receives progress logs (keys: file, rule); nil discards
	// them.
	Logger *slog.Logger
}

// Validate reports every value of o that is wrong, in one joined error.
// It reads no file: Lint reads Policy.Interpreter.
func (o *Options) Validate() error {
	var errs []error
	if err := o.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if d := o.StoreDir; d != "" && d[0] != '/' {
		errs = append(errs, fmt.Errorf("store directory %q is not absolute", d))
	}
	for _, id := range slices.Concat(o.Enable, o.Disable) {
		if _, ok := lookupRule(id); !ok && id != "all" {
			errs = append(errs, fmt.Errorf("unknown rule %q", id))
		}
	}
	if o.Rules != nil {
		if err := o.Rules.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if v := o.DriverVersion; v != "" && !nvdriver.IsVersion(v) {
		errs = append(errs, fmt.Errorf("driver version %q: want an NVIDIA driver version like 580.159.04", v))
	}
	if o.DriverVersion == "" {
		for _, id := range o.Enable {
			if r, ok := lookupRule(id); ok && (r.ID == CompatTooOld || r.ID == CompatChoice) {
				errs = append(errs, fmt.Errorf("rule %s %s needs the target driver version (Options.DriverVersion, --driver-version)", r.ID, r.Name))
			}
		}
	}
	if o.Jobs < 0 {
		errs = append(errs, fmt.Errorf("jobs %d < 1", o.Jobs))
	}
	return errors.Join(errs...)
}

// config is Options resolved for one Lint: defaults filled in, patterns
// compiled, the interpreter's architecture read.
type config struct {
	root        string
	driverLink  string
	driverLinks []string
	storeDir    string
	buildDirs   []string
	enable      []string
	disable     []string
	file        *Config // Options.Rules; nil: look at each tree's root
	jobs        int
	log         *slog.Logger
	// driverVersion is the NVIDIA driver the files are to run with
	// (Options.DriverVersion); "" leaves CP021 nothing to compare with.
	driverVersion string
	// target is the main job's architecture: files it skips are
	// skipped; nil skips none for their architecture.
	target *policy.Target
	// What the main job was asked to keep: old $ORIGIN entries, entries
	// given verbatim, missing libraries matching a pattern.
	preserveOrigin bool
	kept           []string
	ignoreMissing  []*fnmatch.Pattern
}

// resolve validates o and returns the run's copy of it; o is not
// changed.
func resolve(o *Options) (*config, error) {
	if o == nil {
		o = &Options{}
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := &config{
		root:           o.Root,
		storeDir:       o.StoreDir,
		buildDirs:      []string{"/build", "/tmp"},
		enable:         slices.Clone(o.Enable),
		disable:        o.Disable,
		file:           o.Rules,
		jobs:           o.Jobs,
		log:            o.Logger,
		driverVersion:  o.DriverVersion,
		target:         o.Target,
		preserveOrigin: o.Policy.PreserveOrigin,
		kept:           slices.Concat(o.Policy.AppendRunpaths, o.Policy.RuntimeDeps),
	}
	if c.target == nil && o.Policy.Interpreter != "" {
		t, err := policy.InterpreterTarget(o.Policy.Interpreter)
		if err != nil {
			return nil, fmt.Errorf("interpreter %s: %w", o.Policy.Interpreter, err)
		}
		c.target = &t
	}
	// The driver links as the main job resolves them: the default, and
	// the 32-bit one beside the 64-bit one.
	links := o.Policy.Resolved()
	c.driverLink = links.DriverLink
	c.driverLinks = []string{links.DriverLink, links.DriverLink32}
	if c.storeDir == "" {
		c.storeDir = "/nix/store"
	}
	for _, d := range o.Policy.BuildDirs {
		if d != "" && d != "/" {
			c.buildDirs = append(c.buildDirs, d)
		}
	}
	if c.driverVersion != "" {
		c.enable = append(c.enable, CompatTooOld, CompatChoice)
	}
	if c.jobs == 0 {
		c.jobs = runtime.NumCPU()
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.ignoreMissing = compile(o.Policy.IgnoreMissing)
	return c, nil
}

// ruleSet is the effective selection and severities for one tree.
type ruleSet struct {
	on     map[string]bool
	sev    map[string]Severity
	ignore []Ignore
}

func (c *config) ruleSet(file *Config) ruleSet {
	rs := ruleSet{on: map[string]bool{}, sev: map[string]Severity{}}
	for _, r := range rules {
		rs.on[r.ID] = r.Default
		rs.sev[r.ID] = r.Severity
	}
	set := func(ids []string, v bool) {
		for _, id := range ids {
			if id == "all" {
				for k := range rs.on {
					rs.on[k] = v
				}
				continue
			}
			if r, ok := lookupRule(id); ok {
				rs.on[r.ID] = v
			}
		}
	}
	if file != nil {
		set(file.Enable, true)
		set(file.Disable, false)
		for id, s := range file.Severity {
			if r, ok := lookupRule(id); ok {
				rs.sev[r.ID] = s
			}
		}
		rs.ignore = file.Ignore
	}
	set(c.enable, true)
	set(c.disable, false)
	return rs
}

// ignored reports whether rule is silenced for rel (slash-separated, relative
// to the tree root).
func (rs *ruleSet) ignored(rule, rel string) bool {
	for _, ig := range rs.ignore {
		applies := len(ig.Rules) == 0
		for _, id := range ig.Rules {
			if r, ok := lookupRule(id); ok && r.ID == rule {
				applies = true
			}
		}
		if !applies {
			continue
		}
		for _, p := range ig.Paths {
			if doublestar.MatchUnvalidated(p, rel) {
				return true
			}
		}
	}
	return false
}
