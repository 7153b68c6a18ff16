package patch

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/policy"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/symcheck"
)

// ErrSymbols means a file's closure, as decided, fails to load: a
// version it needs is defined by no library, or a data reference (or
// any reference of a file bound now) is defined by none.
var ErrSymbols = errors.New("symbols the loader cannot bind")

// SymbolsMode says what the main job does with the symbol check
// (Config.Symbols).
type SymbolsMode string

const (
	// SymbolsError checks, and a finding that fails at load is an error
	// (nothing is written), as a missing library is.
	SymbolsError SymbolsMode = "error"
	// SymbolsWarn checks and reports, never an error.
	SymbolsWarn SymbolsMode = "warn"
	// SymbolsOff does not check.
	SymbolsOff SymbolsMode = "off"
)

// SymbolsModes are the modes Config.Symbols takes.
var SymbolsModes = []SymbolsMode{SymbolsOff, SymbolsWarn, SymbolsError}

// Classes of a SymbolFinding.
const (
	// ClassFailsAtLoad: the loader stops before the program runs.
	ClassFailsAtLoad = "fails-at-load"
	// ClassFailsWhenCalled: an unresolved function bound lazily: the
	// program runs until the first call.
	ClassFailsWhenCalled = "fails-when-called"
	// ClassLeftToProgram: a library's reference no library of its own
	// closure defines: the program that loads it must (a Python
	// extension's Py* symbols), so it is no finding of the library.
	ClassLeftToProgram = "left-to-program"
	// ClassSkippedDriver: driver libraries the closure needs were not
	// read (the toolkit's stub is not among the search directories), so
	// what they could define was not checked. One per file.
	ClassSkippedDriver = "skipped-driver"
	// ClassNotChecked: the check could not read a file of the closure
	// for a reason the loader does not share (a table it does not model);
	// a table the loader reads out of its bounds is ClassFailsAtLoad.
	ClassNotChecked = "not-checked"
)

// Severities of a SymbolFinding.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
	SeverityInfo    = "info"
	// SeverityIgnored: an error or warning an ignore pattern matches.
	SeverityIgnored = "ignored"
)

// SymbolFinding is one result of the symbol check of an output file's
// closure (File.Symbols).
type SymbolFinding struct {
	File string `json:"file"`
	// Object is the file of the closure whose reference or version need
	// it is (File itself, or a library it loads).
	Object string `json:"object,omitempty"`
	// Symbol is "" for a version need.
	Symbol  string `json:"symbol,omitempty"`
	Version string `json:"version,omitempty"`
	// Library is the library expected to define it: a version need's
	// file name (vn_file); for a symbol, that of its version, if any.
	Library string `json:"library,omitempty"`
	// Use is function, data or copy (symbols only).
	Use      string `json:"use,omitempty"`
	Class    string `json:"class"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	// Pattern is the ignore-symbol pattern that matched.
	Pattern string `json:"pattern,omitempty"`
}

// Name is the symbol as name@version, or @version for a version need.
func (s SymbolFinding) Name() string {
	if s.Version == "" {
		return s.Symbol
	}
	return s.Symbol + "@" + s.Version
}

func (c *job) symbolsMode() SymbolsMode {
	if c.symbols == "" {
		// A binary that cannot load is the failure a build can still
		// prevent, so the check is on unless asked off; what it costs,
		// reading each closure's tables, weighs most on trees of many
		// small files.
		return SymbolsError
	}
	return c.symbols
}

// checkSymbols runs the symbol check over every file decided without
// error (in a dry run too: the closure is the one decided, not the one on
// disk) and returns the error for the load-fatal findings.
func (c *job) checkSymbols(ctx context.Context, rep *Report, work []*fileWork) error {
	sc := c.sym
	if sc == nil {
		return nil
	}
	sc.decide(work)
	var todo []*fileWork
	for _, f := range work {
		if f.Skipped == "" && len(f.Errors) == 0 && (f.Kind == elfedit.KindExecutable || f.Kind == elfedit.KindLibrary) {
			todo = append(todo, f)
		}
	}
	// Every output's references were read, and its definitions
	// summarized, when it was decided (Checker.ReadFile in decide), so
	// the summaries answer for the names the outputs use. Every closure
	// is then resolved before any is bound: resolving reads each library
	// of the closures, and with it learns the names its references use,
	// so that a library's summary, made for the names known then, is made
	// again at most once (symcheck's summaryOf), not at each closure
	// that brings new names.
	trees := make([]resolvedTree, len(todo))
	err := parallel(ctx, c.jobs, len(todo), func(i int) { trees[i] = sc.resolveSafe(todo[i]) })
	if err == nil {
		err = parallel(ctx, c.jobs, len(todo), func(i int) { sc.checkSafe(todo[i], trees[i]) })
	}
	for _, f := range work {
		f.loaded = nil // not needed past the check
	}
	c.sym = nil // nor is what the check read, during the write
	if err != nil {
		return err
	}
	n := 0
	for _, f := range todo {
		for _, s := range f.Symbols {
			switch s.Severity {
			case SeverityError:
				n++
				rep.SymbolErrors++
			case SeverityWarning:
				rep.SymbolWarnings++
			}
		}
	}
	if n > 0 {
		return fmt.Errorf("%w: %d load-fatal", ErrSymbols, n)
	}
	return nil
}

// symbolCheck is one run's symbol check: a Checker shared by every file,
// and the loader simulation's view of the files as decided.
type symbolCheck struct {
	c       *job
	chk     *symcheck.Checker
	read    ldso.Reader
	stubs   []string // stub directories among the search directories
	cfgMu   sync.Mutex
	cfgs    map[[2]int]cfgResult
	ids     *ldso.IdentityCache
	decided map[string]*fileWork // by path, and by path with links resolved
	dirs    sync.Map             // directory → noDir's answer
}

type cfgResult struct {
	cfg ldso.Config
	err error
}

// newSymbolCheck makes the run's symbol check, nil when it is off.
func (c *job) newSymbolCheck() *symbolCheck {
	if c.symbolsMode() == SymbolsOff {
		return nil
	}
	sc := &symbolCheck{c: c, cfgs: map[[2]int]cfgResult{}, decided: map[string]*fileWork{}, ids: &ldso.IdentityCache{}}
	sc.stubs = c.stubDirs()
	sc.chk = symcheck.New(symcheck.Options{
		Opaque:       c.driverLibs.Match,
		StandIn:      sc.standIn,
		OnlyProblems: true,
		Open:         c.bufs.Open,
		OpenTables:   c.openTables,
		Binding:      true,
		// What the check keeps of a file is a few percent of its tables
		// (symcheck's summaries): the budget only bounds a tree far
		// larger than the outputs of one build.
		CacheBytes: 32 << 20,
	})
	return sc
}

// openTables opens a file for the symbol check to read its tables whole:
// through the job's buffers, whose head read holds the whole of a small
// file, so that its tables are copied from it, not read one by one.
func (c *job) openTables(path string) (*elfedit.File, error) {
	if c.tablesOpened != nil {
		c.tablesOpened(path)
	}
	return c.bufs.Open(path)
}

// decide makes the loader simulation's view of the files as decided.
func (sc *symbolCheck) decide(work []*fileWork) {
	// A file is found by the loader simulation under the path the search
	// names, which may resolve links the walk did not: the decided files
	// are also keyed below their roots with links resolved.
	real := map[string]string{}
	for _, f := range work {
		if f.Skipped != "" || len(f.Errors) > 0 {
			continue
		}
		sc.decided[f.Path] = f
		if f.loaded != nil {
			f.loaded = asDecided(f.loaded, f)
		}
		r, ok := real[f.Root]
		if !ok {
			r, _ = filepath.EvalSymlinks(f.Root)
			real[f.Root] = r
		}
		if rel, err := filepath.Rel(f.Root, f.Path); err == nil && r != "" && r != f.Root {
			sc.decided[filepath.Join(r, rel)] = f
		}
	}
	base := sc.chk.Reader()
	var resolved sync.Map // path → *fileWork or nil
	sc.read = func(path string) (*ldso.Object, error) {
		f := sc.decided[path]
		if f == nil {
			if err := noDir(&sc.dirs, path); err != nil {
				return nil, &fs.PathError{Op: "open", Path: path, Err: err}
			}
			if v, ok := resolved.Load(path); ok {
				f, _ = v.(*fileWork)
			} else {
				f = sc.decided[followLinks(path)]
				resolved.Store(path, f)
			}
		}
		if f != nil && f.loaded != nil {
			return f.loaded, nil
		}
		o, err := base(path)
		if err != nil || f == nil {
			return o, err
		}
		return asDecided(o, f), nil
	}
}

// loadedObject is what the symbol check's loader simulation reads of f,
// kept from decide so that the check does not open the outputs again for
// it; nil when the check is off.
func (c *job) loadedObject(f *elfedit.File) *ldso.Object {
	if c.sym == nil {
		return nil
	}
	return ldso.ObjectOf(f)
}

// noDir is why no file can be opened at path for want of its directory:
// ENOENT or ENOTDIR, nil when the directory is one (or cannot be told),
// remembered in seen. The loader simulation tries every name it searches
// for in every directory of a search path, most of them absent on a build
// machine (the driver link and its glibc-hwcaps subdirectories): one stat
// answers for all the names, as the loader itself marks a directory
// "nonexisting" at its first miss there. The directory is path up to its
// last slash, not cleaned: ".." after a link is the kernel's to resolve.
func noDir(seen *sync.Map, path string) error {
	var dir string
	switch i := strings.LastIndexByte(path, '/'); i {
	case -1:
		dir = "."
	case 0:
		dir = "/"
	default:
		dir = path[:i]
	}
	if v, ok := seen.Load(dir); ok {
		err, _ := v.(error)
		return err
	}
	var err error
	switch fi, serr := os.Stat(dir); {
	case serr == nil && !fi.IsDir():
		err = syscall.ENOTDIR
	case errors.Is(serr, syscall.ENOENT):
		err = syscall.ENOENT
	case errors.Is(serr, syscall.ENOTDIR):
		err = syscall.ENOTDIR
	}
	seen.Store(dir, err)
	return err
}

// followLinks is path with its last component's symbolic links followed
// (libz.so.1 → libz.so.1.2.13), "" when it is none: the directories a
// search names are the tree's own.
func followLinks(path string) string {
	for range 40 {
		st, err := os.Lstat(path)
		if err != nil || st.Mode()&os.ModeSymlink == 0 {
			if err != nil {
				return ""
			}
			return path
		}
		t, err := os.Readlink(path)
		if err != nil {
			return ""
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(path), t)
		}
		path = filepath.Clean(t)
	}
	return ""
}

// asDecided is o as the loader will see it once f's edit is written: its
// search path, interpreter and resolution note.
func asDecided(o *ldso.Object, f *fileWork) *ldso.Object {
	e := &f.edit
	d := *o
	changed := false
	switch {
	case e.SetPath != nil && e.Tag == elfedit.TagRPath:
		d.RPath, d.HasRPath, d.RunPath, d.HasRunPath = *e.SetPath, true, "", false
		changed = true
	case e.SetPath != nil:
		d.RunPath, d.HasRunPath, d.RPath, d.HasRPath = *e.SetPath, true, "", false
		changed = true
	case e.RemovePath:
		d.RunPath, d.HasRunPath, d.RPath, d.HasRPath = "", false, "", false
		changed = true
	}
	if e.Interpreter != nil {
		d.Interp = *e.Interpreter
		changed = true
	}
	switch {
	case e.SetNote != nil && e.SetNote.NoteID == ldcache.NoteID:
		d.Note = ldso.NewNote(e.SetNote.Desc, true)
	case slices.Contains(e.RemoveNotes, ldcache.NoteID):
		d.Note = nil
	case changed && slices.Contains(e.Derived, ldcache.NoteID):
		// A note derived from what the edit changes goes with it.
		d.Note = nil
	}
	return &d
}

// stubDirs are the directories of the search path that hold link-time
// stubs (policy.IsStubDir): a search directory, or lib/stubs, lib64/stubs or
// stubs below a recursive search root.
func (c *job) stubDirs() []string {
	var out []string
	add := func(d string) {
		if policy.IsStubDir(d) && !slices.Contains(out, d) {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				out = append(out, d)
			}
		}
	}
	for _, d := range c.search {
		add(d)
	}
	for _, r := range c.searchRecursive {
		add(r)
		for _, sub := range []string{"lib/stubs", "lib64/stubs", "stubs"} {
			add(filepath.Join(r, sub))
		}
	}
	return out
}

// standIn is the stub a driver library's symbols are checked against:
// the first stub directory's file of that name, else of that name less
// its version (libcuda.so.1 → libcuda.so); "" when none has it.
func (sc *symbolCheck) standIn(name string) string {
	if strings.Contains(name, "/") {
		return ""
	}
	names := []string{name}
	if i := strings.Index(name, ".so."); i >= 0 {
		names = append(names, name[:i+3])
	}
	for _, d := range sc.stubs {
		for _, n := range names {
			p := filepath.Join(d, n)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p
			}
		}
	}
	return ""
}

// loaderConfig is the loader the files run under. Where the interpreter
// sits in the libc directory (a Nix build: the bintools' glibc), it is
// nixpkgs' loader, which reads resolution notes and searches that
// directory last, with no ld.so.cache; otherwise this machine's loader,
// with the libc directory searched first among the defaults.
func (sc *symbolCheck) loaderConfig(class elf.Class, m elf.Machine) (ldso.Config, error) {
	key := [2]int{int(class), int(m)}
	sc.cfgMu.Lock()
	defer sc.cfgMu.Unlock()
	if r, ok := sc.cfgs[key]; ok {
		return r.cfg, r.err
	}
	cfg, err := ldso.DefaultConfig("", class, m)
	cfg.WorkDir = "/"
	cfg.Identities = sc.ids
	cfg.Untraced = true
	// The reader refuses every path below a directory noDir finds none of.
	cfg.NoDir = func(dir string) bool { return noDir(&sc.dirs, dir+"/") != nil }
	c := sc.c
	libc := filepath.Clean(c.libcDir)
	switch {
	case c.libcDir != "" && c.Interpreter != "" && filepath.Dir(c.Interpreter) == libc:
		cfg.Loader, cfg.Cache, cfg.DefaultDirs = ldso.LoaderNixOS, nil, []string{libc}
	default:
		cfg.Loader = ldso.LoaderStock
		if c.libcDir != "" && !slices.Contains(cfg.DefaultDirs, libc) {
			cfg.DefaultDirs = append([]string{libc}, cfg.DefaultDirs...)
		}
	}
	sc.cfgs[key] = cfgResult{cfg, err}
	return cfg, err
}

// resolvedTree is a file's closure as the loader simulation resolves it
// under the file's loader configuration, or why it could not be. Every
// file's closure is kept until all are resolved (checkSymbols), so it
// keeps only what the symbol check reads of each need: a whole ldso.Need
// is four times that, and on a tree of thousands of files the kept needs
// alone take a fifth of the heap's limit, which then collects back to
// back.
type resolvedTree struct {
	cfg   ldso.Config
	path  string
	needs []keptNeed
	err   error
}

// keptNeed is what symcheck.Checker.Check reads of an ldso.Need.
type keptNeed struct{ name, requester, path string }

// keep makes t the kept closure.
func (r *resolvedTree) keep(t *ldso.Tree) {
	r.path = t.Path
	r.needs = make([]keptNeed, len(t.Needs))
	for i, n := range t.Needs {
		r.needs[i] = keptNeed{n.Name, n.Requester, n.Path}
	}
}

// tree is the kept closure as an ldso.Tree, for the check of one file.
func (r *resolvedTree) tree() *ldso.Tree {
	needs := make([]ldso.Need, len(r.needs))
	t := &ldso.Tree{Path: r.path, Needs: make([]*ldso.Need, len(r.needs))}
	for i, n := range r.needs {
		needs[i] = ldso.Need{Name: n.name, Requester: n.requester, Path: n.path}
		t.Needs[i] = &needs[i]
	}
	return t
}

// resolveSafe resolves f's closure as decided; a bug in the resolution is
// the error, which checkSafe reports against the file.
func (sc *symbolCheck) resolveSafe(f *fileWork) (r resolvedTree) {
	defer func() {
		if x := recover(); x != nil {
			r.err = fmt.Errorf("internal error (please report): %v", x)
		}
	}()
	r.cfg, r.err = sc.loaderConfig(f.facts.class, f.facts.machine)
	if r.err == nil {
		var t *ldso.Tree
		if t, r.err = ldso.Resolve(r.cfg, sc.read, f.Path); r.err == nil {
			r.keep(t)
		}
	}
	return r
}

// checkSafe is check of the closure resolveSafe resolved, with a bug in
// the check reported against the file instead of killing a whole build.
func (sc *symbolCheck) checkSafe(f *fileWork, r resolvedTree) {
	defer func() {
		if r := recover(); r != nil {
			f.Symbols = append(f.Symbols, SymbolFinding{File: f.Path, Class: ClassNotChecked, Severity: SeverityWarning,
				Message: fmt.Sprintf("symbols not checked: internal error (please report): %v", r)})
		}
	}()
	err := r.err
	if err == nil {
		err = sc.check(f, r.cfg, r.tree())
	}
	switch {
	case errors.Is(err, symcheck.ErrOutOfBounds):
		// The loader reads the table all the same, past its bounds: the
		// program crashes or binds from other bytes.
		f.Symbols = append(f.Symbols, sc.finding(f, SymbolFinding{File: f.Path, Class: ClassFailsAtLoad,
			Message: err.Error() + ": the loader reads it out of bounds"}))
	case err != nil:
		f.Symbols = append(f.Symbols, SymbolFinding{File: f.Path, Class: ClassNotChecked, Severity: SeverityWarning,
			Message: "symbols not checked: " + err.Error()})
	}
}

// check binds f's closure and records its findings in f.Symbols. A
// library's references no library of its closure defines are left to the
// program that loads it; an executable's fail as the loader fails.
func (sc *symbolCheck) check(f *fileWork, cfg ldso.Config, tree *ldso.Tree) error {
	res, err := sc.chk.Check(cfg, tree)
	if err != nil {
		return err
	}
	if res.Unsupported != "" {
		f.Symbols = append(f.Symbols, SymbolFinding{File: f.Path, Class: ClassNotChecked, Severity: SeverityInfo, Message: "symbols not checked: " + res.Unsupported})
		return nil
	}
	exe := f.Kind == elfedit.KindExecutable
	var driver []string
	for _, n := range res.Incomplete {
		if b := filepath.Base(n); sc.c.driverLibs.Match(b) && !slices.Contains(driver, b) {
			driver = append(driver, b)
		}
	}
	if len(driver) > 0 {
		f.Symbols = append(f.Symbols, SymbolFinding{File: f.Path, Library: strings.Join(driver, " "), Class: ClassSkippedDriver, Severity: SeverityInfo,
			Message: fmt.Sprintf("symbols of %s not checked: the driver's libraries come with the machine, and no search directory holds the toolkit's stub", strings.Join(driver, ", "))})
	}
	for _, v := range res.Versions {
		if v.Status != symcheck.FailsAtLoad {
			continue
		}
		f.Symbols = append(f.Symbols, sc.finding(f, SymbolFinding{File: f.Path, Object: v.Object, Version: v.Version, Library: v.File, Class: ClassFailsAtLoad,
			Message: fmt.Sprintf("%s: version `%s' not found (required by %s)", v.Provider, v.Version, v.Object)}))
	}
	for _, b := range res.Symbols {
		if !b.Status.Failing() {
			continue
		}
		s := SymbolFinding{File: f.Path, Object: b.Object, Symbol: b.Name, Version: b.Version, Library: b.File, Use: b.Use, Message: b.Message}
		switch {
		case !exe:
			s.Class = ClassLeftToProgram
		case b.Status == symcheck.FailsAtLoad:
			s.Class = ClassFailsAtLoad
		default:
			s.Class = ClassFailsWhenCalled
		}
		f.Symbols = append(f.Symbols, sc.finding(f, s))
	}
	return nil
}

// finding sets s's severity: by its class and the mode, then the ignore
// patterns.
func (sc *symbolCheck) finding(f *fileWork, s SymbolFinding) SymbolFinding {
	switch s.Class {
	case ClassFailsAtLoad:
		s.Severity = SeverityError
		if sc.c.symbolsMode() == SymbolsWarn {
			s.Severity = SeverityWarning
		}
	case ClassFailsWhenCalled:
		s.Severity = SeverityWarning
	default:
		s.Severity = SeverityInfo
		return s
	}
	cands := []string{filepath.Base(f.Path)}
	if s.Symbol != "" {
		cands = append(cands, s.Symbol)
	}
	if s.Version != "" {
		cands = append(cands, s.Name())
		if s.Symbol != "" {
			cands = append(cands, "@"+s.Version)
		}
	}
	for _, p := range sc.c.ignoreSymbols {
		for _, n := range cands {
			if p.Match(n) {
				s.Severity, s.Pattern = SeverityIgnored, p.String()
				return s
			}
		}
	}
	return s
}
