package patch

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"

	"github.com/cudapatch/cudapatch/rpath/policy"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/fnmatch"
)

// Config configures Run. It is a plain struct, in the shape of
// golang.org/x/tools' packages.Config: the zero value of each field means
// its default, stated on the field, so a caller sets only what it wants
// changed. Run reads a Config and never changes it; it may be reused.
type Config struct {
	// Policy is the RUNPATH policy (rpath/policy): interpreter,
	// cuda_compat, driver link, runtime dependencies, entries to
	// append, relative entries, build directories, dlopen mode,
	// DT_RPATH, ignore-missing patterns. lint.Options takes the same
	// struct, so the flags both commands share mean one thing.
	Policy policy.Config

	// Search are library search directories, searched in order, not
	// recursively. Relative ones are made absolute when Run starts.
	Search []string
	// SearchRecursive adds every directory below each of these that
	// holds a *.so* file, like addAutoPatchelfSearchPath.
	SearchRecursive []string
	// NoRecurse patches only the paths given, not the trees below
	// directories (the default walks them).
	NoRecurse bool
	// IgnoreExisting does not index the libraries of the paths being
	// patched (auto-patchelf's --ignore-existing): only the search
	// directories and the RUNPATH directories of their libraries are
	// used.
	IgnoreExisting bool
	// Libc is the directory of the libc the interpreter belongs to:
	// libraries found there need no RUNPATH entry. "" is none.
	Libc string
	// KeepLibc resolves libc libraries like any other (adds their
	// directory).
	KeepLibc bool

	// Selector builds the libcuda selector of Policy.CudaCompat; its
	// zero value builds none.
	Selector CompatSelector

	// NoResolutionCache writes no resolution note, the cache nixpkgs'
	// loader reads before DT_RUNPATH: an existing note is then only
	// removed where it no longer agrees with the file's RUNPATH and
	// DT_NEEDED. By default the note is written in the same edit as the
	// RUNPATH.
	NoResolutionCache bool
	// DlopenNeeded makes each name a file hands to a loader function of
	// a library outside the outputs (policy.HowOutsideCaller: GModule's
	// g_module_open, libltdl's lt_dlopen) a DT_NEEDED of that file, with
	// its directory in the file's RUNPATH (policy.SourceAddNeeded): the
	// fix packagers apply by hand with patchelf --add-needed. Only names
	// resolved to a library file of that very name qualify; the others
	// stay reported. Off by default: it changes what the file loads, and
	// when.
	DlopenNeeded bool

	// Symbols says what Run does with the symbol check: after every
	// file is decided, the undefined dynamic symbols and version needs
	// of every dynamic ELF file are bound over its closure as decided
	// (the RUNPATH, interpreter and resolution note it is to be written
	// with) the way glibc's loader binds them (rpath/symcheck). ""
	// means SymbolsError: a load-fatal finding is an error.
	Symbols SymbolsMode
	// IgnoreSymbols are Python fnmatch patterns of the symbol check's
	// errors and warnings to ignore: they match the symbol's name,
	// name@version, or @version (so "*@GLIBCXX_3.4.32" ignores that
	// version need and every symbol of that version), or the base name
	// of the file checked.
	IgnoreSymbols []string

	// Write is how the files are written.
	Write WriteOptions

	// Jobs is how many files are read and written at once; 0 means
	// runtime.NumCPU().
	Jobs int
	// Logger receives the run's logs; nil discards them.
	Logger *slog.Logger
	// Progress, if set, is called after each file is done.
	Progress func(done, total int)
	// Decided, if set, is called once every file is decided, before the
	// symbol check, with the number of ELF files among them. What the
	// rest of the run keeps live (each file's decision and plan, the
	// check's tables and closures) grows with that number, so a caller
	// may size a heap limit to it, as cudapatch does.
	Decided func(elfFiles int)

	// hooks are what tests inject (export_test.go); zero in normal use.
	// Unexported, so that they are no part of the API.
	hooks testHooks
}

// CompatSelector is where and with what Run builds the libcuda selector
// of the cuda_compat directory (see rpath/selector): a directory that
// holds cuda_compat's own libcuda needs one, which chooses between it and
// the driver when each process starts, since compat's libcuda first on
// every machine fails with CUDA error 803 on a driver not older than it.
// The selector's directory then comes first in every RUNPATH instead of
// the cuda_compat directory. A dry run builds nothing and decides as if
// it had.
type CompatSelector struct {
	// Dir is the directory (absolute) to build the selector into; ""
	// builds none.
	Dir string
	// CC is the C compiler, a command and its own flags; nil means
	// ["cc"].
	CC []string
}

// WriteOptions are how the write phase writes.
type WriteOptions struct {
	// DryRun decides and verifies everything but writes nothing.
	DryRun bool
	// Sync flushes each file to disk around its commit step.
	Sync bool
	// ShrinkKept shrinks the search path of every file whose RUNPATH
	// Run does not set (nothing to resolve: auto-patchelf leaves such a
	// file as it is) the way patchelf --shrink-rpath does: entries that
	// hold no needed library of the file's machine go, entries that are
	// not absolute stay, DT_RPATH becomes DT_RUNPATH. With it, Run does
	// the work of the --shrink-rpath pass nixpkgs' fixupPhase makes over
	// every ELF file, in the same write.
	ShrinkKept bool
	// KeepOldSections leaves the bytes of tables an edit moves or
	// replaces as they were, instead of zeroing or scrubbing them
	// (patchelf --no-clobber-old-sections): for programs that read their
	// own tables at the old offsets, as Firefox's relrhack does. The old
	// strings, and any store paths they name, then stay in the file.
	KeepOldSections bool
	// PageSize asks that the segments an edit adds be aligned for pages
	// of this many bytes, a power of two (patchelf --page-size).
	// elfedit aligns them to the largest page size of the file's
	// machine (elfedit.MaxPageSize), which satisfies every power of two
	// up to it; a file of a machine whose pages are smaller is refused
	// (its own segments are aligned for those pages, and elfedit aligns
	// to no more). 0 asks nothing.
	PageSize uint64
}

// Validate reports every value of c that is wrong, in one joined error:
// Run refuses such a Config before it reads any file.
func (c *Config) Validate() error {
	var errs []error
	for _, dirs := range [][]string{c.Search, c.SearchRecursive} {
		if slices.Contains(dirs, "") {
			errs = append(errs, errors.New("search directory: empty directory"))
		}
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if slices.Contains(c.Policy.AppendRunpaths, "") {
		// Lint takes an empty entry; the main job would write it, and
		// the loader reads one as the current directory.
		errs = append(errs, errors.New("empty RUNPATH entry to append"))
	}
	if d := c.Selector.Dir; d != "" && !filepath.IsAbs(d) {
		errs = append(errs, fmt.Errorf("selector directory %q is not absolute", d))
	}
	if c.Symbols != "" && !slices.Contains(SymbolsModes, c.Symbols) {
		errs = append(errs, fmt.Errorf("symbols mode %q: want off, warn or error", c.Symbols))
	}
	if slices.Contains(c.IgnoreSymbols, "") {
		errs = append(errs, errors.New("empty ignore-symbol pattern"))
	}
	if n := c.Write.PageSize; n&(n-1) != 0 {
		errs = append(errs, fmt.Errorf("page size %d is not a power of two", n))
	}
	if c.Jobs < 0 {
		errs = append(errs, fmt.Errorf("jobs %d: want at least 1", c.Jobs))
	}
	return errors.Join(errs...)
}

// config is a Config resolved for one run: defaults filled in, patterns
// compiled, directories made absolute. The job owns it, so the run may
// settle values in it (prepareCompat) without touching the caller's.
type config struct {
	policy.Config   // the RUNPATH policy's, resolved
	recurse         bool
	search          []string
	searchRecursive []string
	libcDir         string
	keepLibc        bool
	ignoreExisting  bool
	ignoreMissing   []*fnmatch.Pattern
	driverLibs      policy.DriverMatcher
	noteCache       bool
	selector        selectorBuild // where and how to build the libcuda selector
	symbols         SymbolsMode   // "": SymbolsError
	ignoreSymbols   []*fnmatch.Pattern
	dlopenNeeded    bool // Config.DlopenNeeded
	writeOptions
	jobs int
	log  *slog.Logger
	observers
	bigTable int // the string table size from which a file needs big
	testHooks
}

// observers are what the caller is told as the run goes (Config.Progress,
// Config.Decided).
type observers struct {
	progress func(done, total int)
	decided  func(elfFiles int)
}

// writeOptions are how the write phase writes.
type writeOptions struct {
	shrinkKept bool
	keepOld    bool
	pageSize   uint64
	dryRun     bool
	sync       bool
}

// testHooks are what tests inject (export_test.go); zero in normal use.
type testHooks struct {
	// beforeWrite runs before each file is written.
	beforeWrite func(path string)
	// writeHook runs at the moments of a file's write that
	// elfedit.WithHook names, with the file's path.
	writeHook func(path, at string)
	// newIndex makes the library index: buildIndex, or the eager oracle
	// it is checked against.
	newIndex func(ctx context.Context, j *job, roots []string, below map[string][]string) (resolver, error)
	// wrapOpen wraps the job's open (a counter of the opens).
	wrapOpen func(open openFunc) openFunc
	// discovering runs when decide reads a file's read-only data for
	// dlopen discovery.
	discovering func(path string)
	// tablesOpened runs when the symbol check opens a file to read its
	// tables whole (symcheck.Options.OpenTables).
	tablesOpened func(path string)
	// heldClaims, when set, bounds the claims decide holds (else the
	// descriptors left).
	heldClaims *int64
	// bigTable, when not 0, is the string table size from which a file
	// is decided and written alone (else defaultBigTable).
	bigTable int
	// selectorProc and selectorSys are where the selector reads the
	// machine ("": /proc and /sys).
	selectorProc, selectorSys string
	// codeShare, when not 0, is the least code a part of codeHeld reads
	// (else minCodeShare).
	codeShare int64
}

// openFunc opens a file Run reads, to be planned (edit) or only read.
type openFunc func(path string, edit bool) (*elfedit.File, error)

// resolve validates cfg and returns the run's copy of it.
func resolve(cfg *Config) (*config, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &config{
		Config:         cfg.Policy.Resolved(),
		recurse:        !cfg.NoRecurse,
		libcDir:        cfg.Libc,
		keepLibc:       cfg.KeepLibc,
		ignoreExisting: cfg.IgnoreExisting,
		ignoreMissing:  compilePatterns(cfg.Policy.IgnoreMissing),
		driverLibs:     policy.NewDriverMatcher(policy.DriverLibraries),
		noteCache:      !cfg.NoResolutionCache,
		symbols:        cfg.Symbols,
		ignoreSymbols:  compilePatterns(cfg.IgnoreSymbols),
		dlopenNeeded:   cfg.DlopenNeeded,
		writeOptions: writeOptions{
			shrinkKept: cfg.Write.ShrinkKept,
			keepOld:    cfg.Write.KeepOldSections,
			pageSize:   cfg.Write.PageSize,
			dryRun:     cfg.Write.DryRun,
			sync:       cfg.Write.Sync,
		},
		jobs:      cfg.Jobs,
		log:       cfg.Logger,
		observers: observers{progress: cfg.Progress, decided: cfg.Decided},
		bigTable:  cfg.hooks.bigTable,
		testHooks: cfg.hooks,
	}
	var err error
	if c.search, err = absDirs("search directory", cfg.Search); err != nil {
		return nil, err
	}
	if c.searchRecursive, err = absDirs("search directory", cfg.SearchRecursive); err != nil {
		return nil, err
	}
	if cfg.Selector.Dir != "" {
		c.selector = selectorBuild{dir: cfg.Selector.Dir, cc: cfg.Selector.CC}
		if len(c.selector.cc) == 0 {
			c.selector.cc = []string{"cc"}
		}
	}
	c.selector.proc, c.selector.sys = cfg.hooks.selectorProc, cfg.hooks.selectorSys
	if c.jobs == 0 {
		c.jobs = runtime.NumCPU()
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.bigTable == 0 {
		c.bigTable = defaultBigTable
	}
	return c, nil
}

// compilePatterns compiles Python fnmatch patterns, nil for none.
func compilePatterns(patterns []string) []*fnmatch.Pattern {
	var out []*fnmatch.Pattern
	for _, p := range patterns {
		out = append(out, fnmatch.Compile(p))
	}
	return out
}

func absDirs(what string, dirs []string) ([]string, error) {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if d == "" {
			return nil, fmt.Errorf("%s: empty directory", what)
		}
		a, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, d, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// pageSizeProblem says why a file of machine m cannot meet the page size
// asked for, or "".
func (c *job) pageSizeProblem(m elf.Machine) string {
	if have := elfedit.MaxPageSize(m); c.pageSize > have {
		return fmt.Sprintf("page size %d is larger than the %d that segments added to %v files are aligned to (the largest page size of that machine's kernels)", c.pageSize, have, m)
	}
	return ""
}
