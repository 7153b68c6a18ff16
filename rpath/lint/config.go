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

	"github.com/bmatcuk/doublestar/v4"

	"github.com/cudapatch/cudapatch/rpath/fnmatch"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// ConfigFile is the name of the configuration file Lint reads at the root
// of each directory it is given (unless WithConfig supplies one).
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

// config is what the options fill.
type config struct {
	root        string
	driverLink  string
	driverLinks []string
	storeDir    string
	buildDirs   []string
	enable      []string
	disable     []string
	file        *Config // from WithConfig; nil: look at each tree's root
	jobs        int
	log         *slog.Logger
	// driverVersion is the NVIDIA driver the files are to run with
	// (WithDriverVersion); "" leaves CP021 nothing to compare with.
	driverVersion string
	// target is the main job's architecture (WithInterpreter): files it
	// skips are skipped; nil skips none for their architecture.
	target *policy.Target
	// What the main job was asked to keep: old $ORIGIN entries, entries
	// given verbatim, missing libraries matching a pattern.
	preserveOrigin bool
	kept           []string
	ignoreMissing  []*fnmatch.Pattern
}

// Option configures Lint. Options that can be wrong return an error.
type Option func(*config) error

func newConfig(opts []Option) (*config, error) {
	c := &config{
		driverLink: policy.DefaultDriverLink,
		storeDir:   "/nix/store",
		buildDirs:  []string{"/build", "/tmp"},
		jobs:       runtime.NumCPU(),
		log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	c.driverLinks = []string{c.driverLink, driverLink32(c.driverLink)}
	if c.driverVersion == "" {
		for _, id := range c.enable {
			if r, ok := lookupRule(id); ok && (r.ID == CompatTooOld || r.ID == CompatChoice) {
				return nil, fmt.Errorf("rule %s %s needs the target driver version (WithDriverVersion, --driver-version)", r.ID, r.Name)
			}
		}
	}
	return c, nil
}

func driverLink32(link string) string {
	const a, b = "/opengl-driver/", "/opengl-driver-32/"
	for i := 0; i+len(a) <= len(link); i++ {
		if link[i:i+len(a)] == a {
			return link[:i] + b + link[i+len(a):]
		}
	}
	return link
}

// WithRoot resolves every absolute path (search directories, DT_NEEDED,
// the interpreter) inside dir, as if the files ran chrooted there. The
// paths given to Lint must then lie under dir.
func WithRoot(dir string) Option {
	return func(c *config) error { c.root = dir; return nil }
}

// WithDriverLink sets the driver link (default /run/opengl-driver/lib;
// its -32 twin counts too).
func WithDriverLink(dir string) Option {
	return func(c *config) error {
		if dir == "" || dir[0] != '/' {
			return fmt.Errorf("driver link %q is not absolute", dir)
		}
		c.driverLink = dir
		return nil
	}
}

// WithStoreDir sets the Nix store directory (default /nix/store).
func WithStoreDir(dir string) Option {
	return func(c *config) error {
		if dir == "" || dir[0] != '/' {
			return fmt.Errorf("store directory %q is not absolute", dir)
		}
		c.storeDir = dir
		return nil
	}
}

// WithBuildDirs adds directories whose appearance in a search path is a
// build-directory leak (besides /build and /tmp), such as $NIX_BUILD_TOP.
func WithBuildDirs(dirs ...string) Option {
	return func(c *config) error {
		for _, d := range dirs {
			if d != "" && d != "/" {
				c.buildDirs = append(c.buildDirs, d)
			}
		}
		return nil
	}
}

// WithEnable turns rules on (by ID or name; "all" for every rule). It
// overrides the configuration files.
func WithEnable(ids ...string) Option {
	return func(c *config) error {
		for _, id := range ids {
			if _, ok := lookupRule(id); !ok && id != "all" {
				return fmt.Errorf("unknown rule %q", id)
			}
		}
		c.enable = append(c.enable, ids...)
		return nil
	}
}

// WithDisable turns rules off (by ID or name; "all" for every rule). It
// overrides the configuration files and WithEnable.
func WithDisable(ids ...string) Option {
	return func(c *config) error {
		for _, id := range ids {
			if _, ok := lookupRule(id); !ok && id != "all" {
				return fmt.Errorf("unknown rule %q", id)
			}
		}
		c.disable = append(c.disable, ids...)
		return nil
	}
}

// WithConfig uses cfg for every tree instead of the trees' own
// configuration files.
func WithConfig(cfg *Config) Option {
	return func(c *config) error {
		if cfg == nil {
			return errors.New("nil lint configuration")
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		c.file = cfg
		return nil
	}
}

// WithDriverVersion names the NVIDIA driver (580.159.04) the files are to
// run with, and turns on CP021 compat-older-than-driver, which compares
// with it the libcuda of each cuda_compat directory the loader would take:
// an older one fails with CUDA error 803 there.
func WithDriverVersion(v string) Option {
	return func(c *config) error {
		if !nvdriver.IsVersion(v) {
			return fmt.Errorf("driver version %q: want an NVIDIA driver version like 580.159.04", v)
		}
		c.driverVersion = v
		c.enable = append(c.enable, CompatTooOld, CompatChoice)
		return nil
	}
}

// WithJobs sets how many files are checked at once (default: the number
// of CPUs).
func WithJobs(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("jobs %d < 1", n)
		}
		c.jobs = n
		return nil
	}
}

// WithInterpreter names the interpreter the main job patched the files
// with (its --interpreter; a path on this machine, not inside WithRoot):
// the files it skipped for their architecture or OS ABI are skipped too,
// with the same reason (policy.SkipReason). Without it only files of a
// kind the main job never patches (static, not ELF…) are skipped.
func WithInterpreter(file string) Option {
	return func(c *config) error {
		t, err := policy.InterpreterTarget(file)
		if err != nil {
			return fmt.Errorf("interpreter %s: %w", file, err)
		}
		c.target = &t
		return nil
	}
}

// WithTarget sets the main job's architecture directly, as WithInterpreter
// reads it from an interpreter.
func WithTarget(t policy.Target) Option {
	return func(c *config) error { c.target = &t; return nil }
}

// WithPreserveOrigin says the main job kept the old $ORIGIN entries
// (patch.WithPreserveOrigin): they are not findings of CP011 missing-dir.
func WithPreserveOrigin(on bool) Option {
	return func(c *config) error { c.preserveOrigin = on; return nil }
}

// WithAppendRunpaths names entries the main job appended verbatim
// (patch.WithAppendRunpaths): they are not findings of CP011 missing-dir,
// also where the main job made them relative to the file.
func WithAppendRunpaths(entries ...string) Option {
	return func(c *config) error { c.kept = append(c.kept, entries...); return nil }
}

// WithRuntimeDependencies names the directories the main job put first in
// executables' RUNPATH (patch.WithRuntimeDependencies; nixpkgs adds
// DEP/lib whether it exists or not): as WithAppendRunpaths.
func WithRuntimeDependencies(dirs ...string) Option {
	return WithAppendRunpaths(dirs...)
}

// WithIgnoreMissing takes the main job's ignore-missing patterns (Python
// fnmatch on the basename, rpath/fnmatch): a DT_NEEDED library that
// matches one is not a finding of CP009 unresolvable-needed.
func WithIgnoreMissing(patterns ...string) Option {
	return func(c *config) error {
		for _, p := range patterns {
			if p == "" {
				return errors.New("empty ignore-missing pattern")
			}
			c.ignoreMissing = append(c.ignoreMissing, fnmatch.Compile(p))
		}
		return nil
	}
}

// WithLogger sends progress logs (keys: file, rule) to l.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { c.log = l; return nil }
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
