package patch

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/policy"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/fnmatch"
)

// config is what the options fill.
type config struct {
	policy.Config   // the RUNPATH policy's
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
	dlopenNeeded    bool // WithDlopenNeeded
	writeOptions
	jobs     int
	log      *slog.Logger
	progress func(done, total int)
	bigTable int // the string table size from which a file needs big
	testHooks
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
	// heldClaims, when set, bounds the claims decide holds (else the
	// descriptors left).
	heldClaims *int64
}

// openFunc opens a file Run reads, to be planned (edit) or only read.
type openFunc func(path string, edit bool) (*elfedit.File, error)

// Option configures Run. Options that can be wrong return an error, so a
// bad flag fails before any file is read.
type Option func(*config) error

func newConfig(opts []Option) (*config, error) {
	c := &config{
		recurse: true,
		Config: policy.Config{
			DriverLink:    policy.DefaultDriverLink,
			DriverLinkFor: policy.DriverLinkAll,
			BuildDirs:     []string{"/build"},
			Dlopen:        policy.DlopenResolve,
		},
		driverLibs: policy.NewDriverMatcher(policy.DriverLibraries),
		noteCache:  true,
		jobs:       runtime.NumCPU(),
		bigTable:   defaultBigTable,
		log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.DriverLink32 == "" {
		c.DriverLink32 = strings.Replace(c.DriverLink, "/opengl-driver/", "/opengl-driver-32/", 1)
	}
	return c, nil
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

// WithRecurse walks the paths to patch recursively (the default) or not.
func WithRecurse(on bool) Option { return func(c *config) error { c.recurse = on; return nil } }

// WithSearch adds library search directories, searched in order, not
// recursively.
func WithSearch(dirs ...string) Option {
	return func(c *config) (err error) {
		d, err := absDirs("search directory", dirs)
		c.search = append(c.search, d...)
		return err
	}
}

// WithSearchRecursive adds every directory below each dir that holds a
// *.so* file, like addAutoPatchelfSearchPath.
func WithSearchRecursive(dirs ...string) Option {
	return func(c *config) (err error) {
		d, err := absDirs("search directory", dirs)
		c.searchRecursive = append(c.searchRecursive, d...)
		return err
	}
}

// WithInterpreter sets the interpreter of every dynamic executable.
func WithInterpreter(path string) Option {
	return func(c *config) error { c.Interpreter = path; return nil }
}

// WithLibc names the directory of the libc the interpreter belongs to:
// libraries found there need no RUNPATH entry.
func WithLibc(dir string) Option { return func(c *config) error { c.libcDir = dir; return nil } }

// WithKeepLibc resolves libc libraries like any other (adds their
// directory).
func WithKeepLibc(on bool) Option { return func(c *config) error { c.keepLibc = on; return nil } }

// WithCudaCompat names cuda_compat. Its directory comes first in every
// RUNPATH, ahead of the driver link, when it holds a libcuda selector (or
// no libcuda at all); a directory that holds cuda_compat's own libcuda
// needs WithCudaCompatSelector, which builds the selector that chooses
// between it and the driver when each process starts: compat's libcuda
// first on every machine fails with CUDA error 803 on a driver not older
// than it.
func WithCudaCompat(dir string) Option {
	return func(c *config) error {
		if dir != "" && !filepath.IsAbs(dir) {
			return fmt.Errorf("cuda_compat directory %q is not absolute", dir)
		}
		c.CudaCompat = dir
		return nil
	}
}

// WithCudaCompatSelector builds the libcuda selector of the
// WithCudaCompat directory into dir with the C compiler cc (a command and
// its own flags; default "cc"), and puts dir first instead (see
// rpath/selector). A dry run builds nothing and decides as if it had.
func WithCudaCompatSelector(dir string, cc ...string) Option {
	return func(c *config) error {
		if dir != "" && !filepath.IsAbs(dir) {
			return fmt.Errorf("selector directory %q is not absolute", dir)
		}
		if len(cc) == 0 {
			cc = []string{"cc"}
		}
		c.selector = selectorBuild{dir: dir, cc: cc}
		return nil
	}
}

// WithDriverLink sets the driver link directory (default
// /run/opengl-driver/lib; 32-bit x86 files get /run/opengl-driver-32/lib).
func WithDriverLink(dir string) Option {
	return func(c *config) error {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("driver link %q is not absolute", dir)
		}
		c.DriverLink = dir
		return nil
	}
}

// WithDriverLink32 sets the driver link of 32-bit x86 files.
func WithDriverLink32(dir string) Option {
	return func(c *config) error { c.DriverLink32 = dir; return nil }
}

// WithDriverLinkFor chooses which files get the driver link.
func WithDriverLinkFor(p policy.DriverLinkPolicy) Option {
	return func(c *config) error {
		switch p {
		case policy.DriverLinkAll, policy.DriverLinkNeeded, policy.DriverLinkNone:
			c.DriverLinkFor = p
			return nil
		}
		return fmt.Errorf("driver link policy %q: want all, needed or none", p)
	}
}

// WithRuntimeDependencies puts directories first in the RUNPATH of
// executables (not libraries), as nixpkgs' runtimeDependencies do. They are
// used as given: the hook appends /lib.
func WithRuntimeDependencies(dirs ...string) Option {
	return func(c *config) error { c.RuntimeDeps = append(c.RuntimeDeps, dirs...); return nil }
}

// WithAppendRunpaths appends entries verbatim to every RUNPATH ($ORIGIN
// allowed).
func WithAppendRunpaths(entries ...string) Option {
	return func(c *config) error {
		for _, e := range entries {
			if e == "" {
				return fmt.Errorf("empty RUNPATH entry to append")
			}
		}
		c.AppendRunpaths = append(c.AppendRunpaths, entries...)
		return nil
	}
}

// WithPreserveOrigin keeps the $ORIGIN entries of the old RUNPATH.
func WithPreserveOrigin(on bool) Option {
	return func(c *config) error { c.PreserveOrigin = on; return nil }
}

// WithRelativeRpaths makes RUNPATH entries under storeDir relative to the
// file ("$ORIGIN/../../<hash>-dep/lib") when the file is under storeDir
// too, so that a copy of the whole store (or of a closure) can be moved:
// auto-patchelf's --relative-rpaths, autoPatchelfRelativeRpaths in a
// derivation. The cuda_compat directory and the driver link stay absolute:
// they are not in the closure. "" turns it off.
func WithRelativeRpaths(storeDir string) Option {
	return func(c *config) error {
		if storeDir != "" && !filepath.IsAbs(storeDir) {
			return fmt.Errorf("store directory %q is not absolute", storeDir)
		}
		c.RelativeStore = filepath.Clean(storeDir)
		if storeDir == "" {
			c.RelativeStore = ""
		}
		return nil
	}
}

// WithRelativizeRpath makes RUNPATH entries under the path a file was found
// under (one of the paths given to Run) relative to the file, so that
// tree can be moved as a whole: auto-patchelf's --relativize-rpath. The
// cuda_compat directory and the driver link stay absolute.
func WithRelativizeRpath(on bool) Option {
	return func(c *config) error { c.RelativizeRoot = on; return nil }
}

// WithIgnoreExisting does not index the libraries of the paths being
// patched (auto-patchelf's --ignore-existing): only the search directories
// and the RUNPATH directories of their libraries are used.
func WithIgnoreExisting(on bool) Option {
	return func(c *config) error { c.ignoreExisting = on; return nil }
}

// WithIgnoreMissing ignores missing dependencies whose basename matches one
// of the Python fnmatch patterns ("*" ignores all).
func WithIgnoreMissing(patterns ...string) Option {
	return func(c *config) error {
		for _, p := range patterns {
			if p == "" {
				return fmt.Errorf("empty ignore-missing pattern")
			}
			c.ignoreMissing = append(c.ignoreMissing, fnmatch.Compile(p))
		}
		return nil
	}
}

// WithBuildDirs sets the directories no RUNPATH entry may point into (the
// default is /build, the Nix sandbox's build directory; the CLI adds
// $NIX_BUILD_TOP and $TMPDIR inside a Nix build).
func WithBuildDirs(dirs ...string) Option {
	return func(c *config) error { c.BuildDirs = dirs; return nil }
}

// WithResolutionCache writes, in the same edit as the RUNPATH, the
// resolution note nixpkgs' loader reads before DT_RUNPATH (the default), or
// not: a note is then only removed where it no longer agrees with the
// file's RUNPATH and DT_NEEDED.
func WithResolutionCache(on bool) Option {
	return func(c *config) error { c.noteCache = on; return nil }
}

// WithDlopen says what to do with the library names the read-only data
// of a file that calls dlopen spells (policy.DiscoverDlopen); the default is
// policy.DlopenResolve.
func WithDlopen(m policy.DlopenMode) Option {
	return func(c *config) error {
		if !slices.Contains(policy.DlopenModes, m) {
			return fmt.Errorf("dlopen mode %q: want off, report or resolve", m)
		}
		c.Dlopen = m
		return nil
	}
}

// WithDlopenNeeded makes each name a file hands to a loader function of a
// library outside the outputs (policy.HowOutsideCaller: GModule's
// g_module_open, libltdl's lt_dlopen) a DT_NEEDED of that file, with its
// directory in the file's RUNPATH (policy.SourceAddNeeded): the fix
// packagers apply by hand with patchelf --add-needed. Only names resolved
// to a library file of that very name qualify; the others stay reported.
// Off by default: it changes what the file loads, and when.
func WithDlopenNeeded(on bool) Option {
	return func(c *config) error { c.dlopenNeeded = on; return nil }
}

// WithShrinkKept shrinks the search path of every file whose RUNPATH
// cudapatch does not set (nothing to resolve: auto-patchelf leaves such a
// file as it is) the way patchelf --shrink-rpath does: entries that hold
// no needed library of the file's machine go, entries that are not
// absolute stay, DT_RPATH becomes DT_RUNPATH. With it, cudapatch does the
// work of the --shrink-rpath pass nixpkgs' fixupPhase makes over every ELF
// file, in the same write.
func WithShrinkKept(on bool) Option {
	return func(c *config) error { c.shrinkKept = on; return nil }
}

// WithForceRPath writes the search paths Run sets as DT_RPATH instead
// of DT_RUNPATH (patchelf --force-rpath, which packages pass through
// patchelfFlags): DT_RPATH outranks LD_LIBRARY_PATH and is inherited by
// the libraries the file loads. Such a file gets no resolution note
// (an old one is removed): nixpkgs' loader reads the note only after the
// DT_RPATH walk, and patchelf refuses --build-resolution-cache with
// --force-rpath.
func WithForceRPath(on bool) Option {
	return func(c *config) error { c.ForceRPath = on; return nil }
}

// WithKeepOldSections leaves the bytes of tables an edit moves or
// replaces as they were, instead of zeroing or scrubbing them (patchelf
// --no-clobber-old-sections): for programs that read their own tables
// at the old offsets, as Firefox's relrhack does. The old strings, and
// any store paths they name, then stay in the file.
func WithKeepOldSections(on bool) Option {
	return func(c *config) error { c.keepOld = on; return nil }
}

// WithPageSize asks that the segments an edit adds be aligned for pages
// of size bytes (patchelf --page-size). elfedit aligns them to the
// largest page size of the file's machine (elfedit.MaxPageSize), which
// satisfies every power of two up to it; a file of a machine whose
// pages are smaller than size is refused (its own segments are aligned
// for those pages, and elfedit aligns to no more). 0 asks nothing.
func WithPageSize(size uint64) Option {
	return func(c *config) error {
		if size&(size-1) != 0 {
			return fmt.Errorf("page size %d is not a power of two", size)
		}
		c.pageSize = size
		return nil
	}
}

// pageSizeProblem says why a file of machine m cannot meet the page size
// asked for, or "".
func (c *job) pageSizeProblem(m elf.Machine) string {
	if have := elfedit.MaxPageSize(m); c.pageSize > have {
		return fmt.Sprintf("page size %d is larger than the %d that segments added to %v files are aligned to (the largest page size of that machine's kernels)", c.pageSize, have, m)
	}
	return ""
}

// WithDryRun decides and verifies everything but writes nothing.
func WithDryRun(on bool) Option { return func(c *config) error { c.dryRun = on; return nil } }

// WithSync flushes each file to disk around its commit step.
func WithSync(on bool) Option { return func(c *config) error { c.sync = on; return nil } }

// WithJobs sets how many files are read and written at once.
func WithJobs(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("jobs %d: want at least 1", n)
		}
		c.jobs = n
		return nil
	}
}

// WithLogger sets the logger (by default logs are discarded).
func WithLogger(l *slog.Logger) Option { return func(c *config) error { c.log = l; return nil } }

// WithProgress is called after each file is done.
func WithProgress(f func(done, total int)) Option {
	return func(c *config) error { c.progress = f; return nil }
}
