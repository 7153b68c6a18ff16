package lint

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/cudapatch/cudapatch/internal/printable"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/fnmatch"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/selector"
	"github.com/cudapatch/cudapatch/rpath/symcheck"
)

// Finding is one fault in one file.
type Finding struct {
	Rule     string   `json:"rule"`
	Name     string   `json:"name"`
	Severity Severity `json:"severity"`
	// Path is the file, as found under the path given to Lint.
	Path string `json:"path"`
	// Entry is what the finding is about, when it is one thing: a
	// search-path entry, a DT_NEEDED name, a verifier rule.
	Entry   string `json:"entry,omitempty"`
	Message string `json:"message"`
}

// String is the finding on one line, as WriteText prints it: the path
// and message, which hold bytes of the files, escaped.
func (f Finding) String() string {
	return fmt.Sprintf("%s: %s %s %s: %s", printable.String(f.Path), f.Severity, f.Rule, f.Name, printable.String(f.Message))
}

// Report is the result of Lint.
type Report struct {
	// Files are the ELF files checked, sorted.
	Files []string `json:"files"`
	// Findings are sorted by file, then rule.
	Findings []Finding `json:"findings"`
	// Skipped are the ELF files not checked because the main job does not
	// patch them, sorted, with its reason (policy.SkipReason).
	Skipped []Skip `json:"skipped,omitempty"`
}

// Skip is an ELF file lint did not check, and why.
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Count returns the number of findings at or above level.
func (r *Report) Count(level Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity >= level {
			n++
		}
	}
	return n
}

// job is one file to check.
type job struct {
	path    string // as found
	logical string // inside the root
	rel     string // relative to its tree root, '/'-separated
	rules   *ruleSet
}

// Lint checks every ELF file under paths (files or directories, walked
// recursively; symbolic links are not followed) and returns the findings.
// The error is for bad options and for paths that cannot be read; faults
// of files, including files that do not parse, are findings.
//
// Lint validates opts first (Options.Validate); a nil opts is the zero
// Options. opts is not changed.
func Lint(ctx context.Context, opts *Options, paths []string) (*Report, error) {
	c, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	var jobs []job
	for _, p := range paths {
		js, err := c.collect(ctx, p)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, js...)
	}
	l := &linter{
		config:    c,
		read:      ldso.ElfReader(),
		driver:    compile(policy.DriverLibraries),
		dlopener:  compile(policy.KnownDlopeners),
		dirs:      map[string][]string{},
		ldcfg:     map[[2]int]ldcfgResult{},
		versions:  map[string]string{},
		selectors: map[string]*selector.Info{},
	}
	// The driver's libraries come with the machine: what they define is
	// not known at build time. The symbol check reads its tables in the
	// loader simulation's open of each file.
	l.symbols = symcheck.New(symcheck.Options{Opaque: func(name string) bool { return matchAny(l.driver, name) }, OnlyProblems: true})
	for _, j := range jobs {
		if j.rules.on[SymbolVersion] || j.rules.on[SymbolAtLoad] || j.rules.on[SymbolWhenCalled] {
			l.read = l.symbols.Reader()
			break
		}
	}
	results := make([]checked, len(jobs))
	errs := make([]error, len(jobs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(c.jobs, max(len(jobs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i], errs[i] = l.check(jobs[i])
			}
		}()
	}
	for i := range jobs {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep := &Report{Files: []string{}, Findings: []Finding{}}
	for i, j := range jobs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		switch r := results[i]; {
		case !r.elf:
		case r.skipped != "":
			rep.Skipped = append(rep.Skipped, Skip{Path: j.path, Reason: r.skipped})
		default:
			rep.Files = append(rep.Files, j.path)
			rep.Findings = append(rep.Findings, r.findings...)
		}
	}
	sort.Strings(rep.Files)
	sort.Slice(rep.Skipped, func(a, b int) bool { return rep.Skipped[a].Path < rep.Skipped[b].Path })
	sort.SliceStable(rep.Findings, func(a, b int) bool {
		fa, fb := rep.Findings[a], rep.Findings[b]
		if fa.Path != fb.Path {
			return fa.Path < fb.Path
		}
		return fa.Rule < fb.Rule
	})
	return rep, nil
}

// collect lists the regular files under p with the rules of p's tree.
func (c *config) collect(ctx context.Context, p string) ([]job, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	file := c.file
	if file == nil && st.IsDir() {
		cf := filepath.Join(p, ConfigFile)
		if _, err := os.Stat(cf); err == nil {
			if file, err = LoadConfig(cf); err != nil {
				return nil, err
			}
		}
	}
	rs := c.ruleSet(file)
	var out []job
	add := func(fp, rel string) error {
		lg, err := c.logical(fp)
		if err != nil {
			return err
		}
		out = append(out, job{path: fp, logical: lg, rel: filepath.ToSlash(rel), rules: &rs})
		return nil
	}
	if !st.IsDir() {
		if !st.Mode().IsRegular() {
			// Not opened: a FIFO would wait for a writer.
			return nil, fmt.Errorf("%s: %w", p, elfedit.ErrNotRegular)
		}
		return out, add(p, filepath.Base(p))
	}
	err = filepath.WalkDir(p, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(p, fp)
		return add(fp, rel)
	})
	return out, err
}

// logical returns the path of host file p as seen inside the root.
func (c *config) logical(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if c.root == "" {
		return filepath.ToSlash(abs), nil
	}
	root, err := filepath.Abs(c.root)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is not under the root %s", p, c.root)
	}
	return path.Join("/", filepath.ToSlash(rel)), nil
}

// host returns the host path of logical path p.
func (c *config) host(p string) string {
	if c.root == "" {
		return p
	}
	return filepath.Join(c.root, filepath.FromSlash(p))
}

type ldcfgResult struct {
	cfg ldso.Config
	err error
}

// linter holds what the checks share; its maps are guarded by mu.
type linter struct {
	*config
	read     ldso.Reader
	driver   []*fnmatch.Pattern
	dlopener []*fnmatch.Pattern

	mu        sync.Mutex
	dirs      map[string][]string // host directory → names in it; nil: none
	ldcfg     map[[2]int]ldcfgResult
	versions  map[string]string         // libcuda file (logical) → the version it carries
	selectors map[string]*selector.Info // directory (logical) → its selector; nil: none
	symbols   *symcheck.Checker
}

func compile(patterns []string) []*fnmatch.Pattern {
	out := make([]*fnmatch.Pattern, len(patterns))
	for i, p := range patterns {
		out[i] = fnmatch.Compile(p)
	}
	return out
}

func matchAny(ps []*fnmatch.Pattern, name string) bool {
	for _, p := range ps {
		if p.Match(path.Base(name)) {
			return true
		}
	}
	return false
}

// listDir returns the names in logical directory d, or nil if it is not a
// readable directory.
func (l *linter) listDir(d string) ([]string, bool) {
	h := l.host(d)
	l.mu.Lock()
	names, ok := l.dirs[h]
	l.mu.Unlock()
	if ok {
		return names, names != nil
	}
	ents, err := os.ReadDir(h)
	if err == nil {
		names = []string{}
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	l.mu.Lock()
	l.dirs[h] = names
	l.mu.Unlock()
	return names, names != nil
}

// libcudaVersion is the version of dir's libcuda.so.1 (symbolic links
// followed inside the root): the one it carries, else its file name's; ""
// when there is none or it says nothing.
func (l *linter) libcudaVersion(dir string) string {
	p := path.Join(dir, "libcuda.so.1")
	name := ""
	for range 40 {
		if v := nvdriver.NameVersion(p); v != "" {
			name = v
		}
		t, err := os.Readlink(l.host(p))
		if err != nil {
			break
		}
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(p), t)
		}
		p = t
	}
	l.mu.Lock()
	v, ok := l.versions[p]
	l.mu.Unlock()
	if !ok {
		if lc, err := nvdriver.ReadLibcudaFile(l.host(p)); err == nil {
			v = lc.Version
		}
		l.mu.Lock()
		l.versions[p] = v
		l.mu.Unlock()
	}
	if v == "" {
		v = name
	}
	return v
}

func (l *linter) loaderConfig(class elf.Class, mach elf.Machine) (ldso.Config, error) {
	key := [2]int{int(class), int(mach)}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.ldcfg[key]
	if !ok {
		r.cfg, r.err = ldso.DefaultConfig(l.root, class, mach)
		r.cfg.WorkDir = "/"
		l.ldcfg[key] = r
	}
	return r.cfg, r.err
}

var elfMagic = []byte(elf.ELFMAG)

// isELF reports whether the file starts with the ELF magic.
func isELF(p string) (bool, error) {
	// Non-blocking: a path swapped for a FIFO since it was listed is not
	// waited on, and is no ELF file.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return false, err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(f, b); err != nil {
		return false, nil
	}
	return bytes.Equal(b, elfMagic), nil
}

// checked is what check found out about one file.
type checked struct {
	elf      bool   // it starts with the ELF magic
	skipped  string // why the main job does not patch it; "" if it does
	findings []Finding
}

// check runs every enabled rule on one file that the main job patches.
func (l *linter) check(j job) (checked, error) {
	ok, err := isELF(j.path)
	if err != nil || !ok {
		if err == nil {
			l.log.Debug("skipped", "file", j.path, "reason", policy.SkippedNotELF)
		}
		return checked{}, err
	}
	var out []Finding
	add := func(id, entry, format string, args ...any) {
		if !j.rules.on[id] || j.rules.ignored(id, j.rel) {
			return
		}
		r, _ := RuleByID(id)
		out = append(out, Finding{Rule: id, Name: r.Name, Severity: j.rules.sev[id], Path: j.path, Entry: entry, Message: fmt.Sprintf(format, args...)})
	}
	f, err := elfedit.Open(j.path)
	if err != nil {
		add(VerifyFailed, "", "not a readable ELF file: %v", err)
		return checked{elf: true, findings: out}, nil
	}
	if note := f.InterruptedNote(); note != "" {
		// Checked as the loader maps it, which is what lint judges.
		l.log.Warn(note, "file", j.path)
	}
	in := f.Info()
	if why := policy.SkipReason(in, l.target); why != "" {
		f.Close()
		l.log.Debug("skipped", "file", j.path, "reason", why)
		return checked{elf: true, skipped: why}, nil
	}
	problems := f.Verify()
	note := ldso.ReadNote(f)
	var dlopened []string
	if note != nil && noteBeyondNeeded(note, in.Needed) {
		// The main job gives the names of .note.dlopen, or else those
		// dlopen discovery finds, note entries too: read them only for a
		// note that has more than DT_NEEDED.
		for _, d := range in.Dlopen {
			dlopened = append(dlopened, d.Soname...)
		}
		discovered, _ := policy.DiscoverDlopen(f) // none with a .note.dlopen
		dlopened = append(dlopened, discovered...)
	}
	f.Close()
	l.log.Debug("lint", "file", j.path, "kind", in.Kind)

	for _, p := range problems {
		if p.Rule == "path-empty-entry" {
			continue // CP006 says it with the entry
		}
		add(VerifyFailed, p.Rule, "%s", p.Msg)
	}
	l.checkInterp(j, in, add)
	l.checkPath(j, in, add)
	l.checkNeeded(j, in, add)
	l.checkNote(j, in, note, dlopened, add)
	return checked{elf: true, findings: out}, nil
}

type addFunc func(id, entry, format string, args ...any)

func (l *linter) checkInterp(j job, in elfedit.Info, add addFunc) {
	store := strings.TrimSuffix(l.storeDir, "/") + "/"
	if in.Interpreter != "" && strings.HasPrefix(j.logical, store) && !strings.HasPrefix(in.Interpreter, store) {
		add(InterpOutsideStore, in.Interpreter, "interpreter %s is outside %s: the program depends on the host's loader and libc", in.Interpreter, l.storeDir)
	}
}

func (l *linter) isDriverLink(e string) bool {
	return path.IsAbs(e) && slices.Contains(l.driverLinks, path.Clean(e))
}

// expandOrigin replaces $ORIGIN; ok is false for entries with other
// dynamic string tokens, whose value depends on the machine.
func expandOrigin(e, origin string) (string, bool) {
	e = strings.ReplaceAll(e, "${ORIGIN}", origin)
	e = strings.ReplaceAll(e, "$ORIGIN", origin)
	return e, !strings.Contains(e, "$")
}

// isKept says whether search-path entry e of a file in directory origin
// is one the main job was asked to keep: an old $ORIGIN entry under
// Policy.PreserveOrigin, or an entry given verbatim, as given or made
// relative to the file (--relative-rpaths, --relativize-rpath).
func (l *linter) isKept(e, origin string) bool {
	if l.preserveOrigin && (strings.Contains(e, "$ORIGIN") || strings.Contains(e, "${ORIGIN}")) {
		return true
	}
	dir, ok := expandOrigin(e, origin)
	for _, k := range l.kept {
		if k == e {
			return true
		}
		if kd, kok := expandOrigin(k, origin); ok && kok && path.IsAbs(dir) && path.Clean(kd) == path.Clean(dir) {
			return true
		}
	}
	return false
}

func (l *linter) checkPath(j job, in elfedit.Info, add addFunc) {
	p := searchPath{origin: path.Dir(j.logical)}
	switch {
	case in.RunPath != nil:
		p.value, p.tag = *in.RunPath, "DT_RUNPATH"
	case in.RPath != nil:
		p.value, p.tag = *in.RPath, "DT_RPATH"
	}
	if in.RPath != nil {
		if in.RunPath != nil {
			add(RPathNotRunPath, "", "DT_RPATH %q is set beside DT_RUNPATH; glibc ignores it, other loaders may not: remove it", *in.RPath)
		} else {
			add(RPathNotRunPath, "", "search path %q is in DT_RPATH, which outranks LD_LIBRARY_PATH and is inherited by every library the file loads: use DT_RUNPATH", *in.RPath)
		}
	}
	if p.tag == "" && len(in.Needed) > 0 {
		add(NoSearchPath, "", "no DT_RUNPATH or DT_RPATH: its %d DT_NEEDED libraries are found only through LD_LIBRARY_PATH, ld.so.cache and the system directories", len(in.Needed))
	}
	if p.value != "" {
		p.entries = strings.Split(p.value, ":")
	}
	p.driverIdx = slices.IndexFunc(p.entries, l.isDriverLink)
	p.driverNames, p.noteNames = l.driverNeeds(in)
	if p.driverIdx < 0 {
		l.checkDriverLinkMissing(j, in, p, add)
	}
	seen := map[string]bool{}
	for i, e := range p.entries {
		if e == "" {
			add(RelativeEntry, e, "%s %q has an empty entry, which the loader takes for the current directory", p.tag, p.value)
			continue
		}
		key := e
		if path.IsAbs(e) {
			key = path.Clean(e)
		}
		if seen[key] {
			add(DuplicateEntry, e, "%s lists %s more than once", p.tag, e)
			continue
		}
		seen[key] = true
		l.checkEntry(p, i, e, add)
	}
	l.checkMisread(p, add)
}

// checkMisread: entries that spell an existing directory the loader
// reads otherwise, in the main job's words (ldcache.Unnameable).
func (l *linter) checkMisread(p searchPath, add addFunc) {
	if !strings.ContainsAny(p.value, "$:") {
		return
	}
	exists := func(d string) bool {
		if r := ldcache.OriginRest(d); r != d {
			d = p.origin + r
		}
		return path.IsAbs(d) && l.isDir(d)
	}
	for _, m := range ldcache.MisreadDirs(p.value, exists) {
		if len(m.Entries) == 1 {
			add(MisreadEntry, m.Dir, "%s entry %s names a directory that exists, but no RUNPATH entry can name it: %s", p.tag, m.Dir, m.Why)
			continue
		}
		add(MisreadEntry, m.Dir, "%s entries %s spell the directory %s, which no RUNPATH entry can name: %s", p.tag, strings.Join(m.Entries, " and "), m.Dir, m.Why)
	}
}

// isDir says whether the absolute path d names a directory as the
// kernel resolves it: a ".." steps back from the directory before it,
// which must be there. path.Clean alone steps back over a component
// that is not: "$ORIGIN/../lib:$ORIGIN/../etc", two entries joined, would
// name .../etc, though no "lib:$ORIGIN" exists.
func (l *linter) isDir(d string) bool {
	at := "/"
	for _, c := range strings.Split(d, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if _, ok := l.listDir(at); !ok {
				return false
			}
			at = path.Dir(at)
			continue
		}
		at = path.Join(at, c)
	}
	_, ok := l.listDir(at)
	return ok
}

// searchPath is a file's search path as checkPath reads it: the value and
// its tag ("" when there is none), its entries, the directory $ORIGIN
// names, where the driver link is (-1: nowhere), and the driver libraries
// the file needs by DT_NEEDED and by .note.dlopen.
type searchPath struct {
	value, tag             string
	entries                []string
	origin                 string
	driverIdx              int
	driverNames, noteNames []string
}

// driverNeeds lists the driver libraries a file needs: in DT_NEEDED, and
// in its .note.dlopen (each once).
func (l *linter) driverNeeds(in elfedit.Info) (driverNames, noteNames []string) {
	for _, n := range in.Needed {
		if matchAny(l.driver, n) {
			driverNames = append(driverNames, n)
		}
	}
	for _, d := range in.Dlopen {
		for _, s := range d.Soname {
			if matchAny(l.driver, s) && !slices.Contains(noteNames, s) {
				noteNames = append(noteNames, s)
			}
		}
	}
	return driverNames, noteNames
}

// checkDriverLinkMissing: a file that needs the driver (DT_NEEDED,
// .note.dlopen, a known dlopener) and has no driver link in its path.
func (l *linter) checkDriverLinkMissing(j job, in elfedit.Info, p searchPath, add addFunc) {
	why := ""
	switch {
	case len(p.driverNames) > 0:
		why = "needs " + strings.Join(p.driverNames, ", ")
	case len(p.noteNames) > 0:
		why = "dlopens " + strings.Join(p.noteNames, " or ") + " (.note.dlopen)"
	case matchAny(l.dlopener, j.logical) || (in.Soname != "" && matchAny(l.dlopener, in.Soname)):
		why = "dlopens libcuda.so.1 (known dlopener)"
	}
	if why == "" {
		return
	}
	where := "it has no search path"
	if p.tag != "" {
		where = fmt.Sprintf("%s is %q", p.tag, p.value)
	}
	add(DriverLinkMissing, l.driverLink, "%s, but %s is not in its search path (%s): put it first, or after cuda_compat", why, l.driverLink, where)
}

// checkEntry checks entry i, e, of a search path, neither empty nor seen
// before.
func (l *linter) checkEntry(p searchPath, i int, e string, add addFunc) {
	if !path.IsAbs(e) && !strings.HasPrefix(e, "$ORIGIN") && !strings.HasPrefix(e, "${ORIGIN}") {
		add(RelativeEntry, e, "%s entry %q is relative: the loader resolves it against the current directory", p.tag, e)
		return
	}
	leak := l.checkBuildDir(p.tag, e, add)
	if policy.IsStubDir(e) {
		add(StubDir, e, "%s entry %s holds link-time stubs; a stub libcuda reached at run time fails with \"CUDA driver is a stub library\"", p.tag, e)
	}
	compat := policy.IsCompatDir(e)
	if compat && p.driverIdx >= 0 && i > p.driverIdx {
		add(CompatAfterDriver, e, "cuda_compat directory %s comes after the driver link %s, so the driver's libcuda wins: put compat first", e, l.driverLink)
	}
	if compat && l.driverVersion != "" && (p.driverIdx < 0 || i < p.driverIdx) {
		if dir, ok := expandOrigin(e, p.origin); ok {
			l.checkCompat(e, dir, add)
		}
	}
	dir, expanded := expandOrigin(e, p.origin)
	if !expanded || l.isDriverLink(e) {
		return
	}
	names, exists := l.listDir(dir)
	if !exists && !compat && !leak && !l.isKept(e, p.origin) {
		add(MissingDir, e, "%s entry %s does not exist", p.tag, e)
	}
	if exists && !compat && p.driverIdx >= 0 && i < p.driverIdx {
		for _, n := range names {
			if matchAny(l.driver, n) && (strings.Contains(n, ".so.") || slices.Contains(p.driverNames, n) || slices.Contains(p.noteNames, n)) {
				add(DriverShadowed, e, "%s provides driver library %s ahead of the driver link %s, so the loader takes it instead of the running driver's", e, n, l.driverLink)
				break
			}
		}
	}
}

// checkBuildDir reports an entry under a build directory, or naming
// $NIX_BUILD_TOP, and says whether it did.
func (l *linter) checkBuildDir(tag, e string, add addFunc) bool {
	if b := l.underBuildDir(e); b != "" {
		add(BuildDirLeak, e, "%s entry %s is under the build directory %s, which is gone at run time (or, worse, writable by others)", tag, e, b)
		return true
	}
	if strings.Contains(e, "$NIX_BUILD_TOP") || strings.Contains(e, "${NIX_BUILD_TOP}") {
		add(BuildDirLeak, e, "%s entry %s names $NIX_BUILD_TOP, unexpanded", tag, e)
		return true
	}
	return false
}

func (l *linter) checkNeeded(j job, in elfedit.Info, add addFunc) {
	on := j.rules.on
	if len(in.Needed) == 0 || !(on[UnresolvableNeeded] || on[SymbolVersion] || on[SymbolAtLoad] || on[SymbolWhenCalled]) {
		return
	}
	cfg, err := l.loaderConfig(in.ELFClass(), in.ELFMachine())
	if err != nil {
		add(UnresolvableNeeded, "", "cannot set up the loader simulation: %v", err)
		return
	}
	tr, err := ldso.Resolve(cfg, l.read, j.logical)
	if err != nil {
		add(UnresolvableNeeded, "", "cannot simulate loading: %v", err)
		return
	}
	for _, n := range tr.Needs {
		if n.Depth != 1 {
			continue
		}
		switch {
		case n.Error != "":
			add(UnresolvableNeeded, n.Name, "%s: the loader would stop: %s", n.Name, l.unroot(n.Error))
		case !n.Found() && !matchAny(l.driver, n.Name) && !matchAny(l.ignoreMissing, n.Name):
			var steps []string
			for _, a := range n.Tried {
				if s := string(a.Step); !slices.Contains(steps, s) {
					steps = append(steps, s)
				}
			}
			tried := "nothing to search"
			if len(steps) > 0 {
				tried = "searched " + strings.Join(steps, ", ")
			}
			add(UnresolvableNeeded, n.Name, "%s not found (%s)", n.Name, tried)
		}
	}
	if on[SymbolVersion] || on[SymbolAtLoad] || on[SymbolWhenCalled] {
		l.checkSymbols(j, in, cfg, tr, add)
	}
}

// checkSymbols binds the closure's symbols as the loader would. A
// library's own version needs are checked (its DT_NEEDED libraries give
// them); undefined symbols only for an executable's closure, since a
// library's may come from the program that loads it.
func (l *linter) checkSymbols(j job, in elfedit.Info, cfg ldso.Config, tr *ldso.Tree, add addFunc) {
	exe := in.Kind == elfedit.KindExecutable
	check := l.symbols.CheckVersions
	if exe && (j.rules.on[SymbolAtLoad] || j.rules.on[SymbolWhenCalled]) {
		check = l.symbols.Check
	}
	r, err := check(cfg, tr)
	if err != nil {
		add(SymbolVersion, "", "cannot check the symbols: %s", l.unroot(err.Error()))
		return
	}
	for _, v := range r.Versions {
		if v.Status == symcheck.FailsAtLoad && (exe || v.Object == tr.Path) {
			add(SymbolVersion, v.File+"@"+v.Version, "%s: version `%s' not found (required by %s): fails at load", v.Provider, v.Version, v.Object)
		}
	}
	if !exe {
		return
	}
	for _, b := range r.Symbols {
		name := b.Name
		if b.Version != "" {
			name += "@" + b.Version
		}
		switch b.Status {
		case symcheck.FailsAtLoad:
			add(SymbolAtLoad, name, "%s (%s, required by %s) is defined by no library of the closure: fails at load", name, b.Use, b.Object)
		case symcheck.FailsWhenCalled:
			add(SymbolWhenCalled, name, "%s (required by %s) is defined by no library of the closure: fails when first called", name, b.Object)
		}
	}
}

// unroot removes the root prefix from host paths in a message.
func (l *linter) unroot(s string) string {
	if l.root == "" {
		return s
	}
	r, err := filepath.Abs(l.root)
	if err != nil {
		return s
	}
	return strings.ReplaceAll(s, r, "")
}

// checkCompat judges the cuda_compat entry e (directory dir) for the
// target driver: a selector by the choice it makes there (nvdriver.Choose,
// as at run time), cuda_compat's own libcuda by its version, as the
// loader takes it on every machine.
func (l *linter) checkCompat(e, dir string, add addFunc) {
	if sel := l.selectorIn(dir); sel != nil {
		c := sel.Choose(nvdriver.Machine{Module: l.driverVersion})
		if c.Fallback {
			add(CompatTooOld, e, "the libcuda selector in %s takes the driver %s, as cuda_compat %s cannot serve it (%s): a program built for compat's CUDA may not run on either", e, l.driverVersion, sel.CompatVersion, c.Reason)
			return
		}
		add(CompatChoice, e, "the libcuda selector in %s takes the %s with driver %s: %s", e, c.Use, l.driverVersion, c.Reason)
		return
	}
	if v := l.libcudaVersion(dir); v != "" && nvdriver.Compare(v, l.driverVersion) < 0 {
		add(CompatTooOld, e, "cuda_compat directory %s holds libcuda %s, older than the driver %s the file is to run with, and the loader takes it on every machine: CUDA fails with error 803 (unsupported display driver / cuda driver combination); build with a selector (cudapatch --cuda-compat DIR --cuda-compat-selector OUT), which takes the driver there", e, v, l.driverVersion)
	}
}

// selectorIn reads the libcuda selector of dir (inside the root); nil when
// its libcuda.so.1 is none.
func (l *linter) selectorIn(dir string) *selector.Info {
	l.mu.Lock()
	sel, ok := l.selectors[dir]
	l.mu.Unlock()
	if ok {
		return sel
	}
	sel, err := selector.Read(l.host(path.Join(dir, selector.Name)))
	if err != nil {
		sel = nil
	}
	l.mu.Lock()
	l.selectors[dir] = sel
	l.mu.Unlock()
	return sel
}
