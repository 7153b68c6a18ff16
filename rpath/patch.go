package rpath

import (
	"cmp"
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
	"sync/atomic"
	"syscall"

	"github.com/cudapatch/cudapatch/internal/confine"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// Errors Patch returns, wrapped; the CLI maps them to exit codes.
var (
	// ErrUnsatisfied means some dependency was found nowhere and matched no
	// ignore pattern.
	ErrUnsatisfied = errors.New("unsatisfied dependencies")
	// ErrAudit means a planned RUNPATH failed the audit.
	ErrAudit = errors.New("RUNPATH audit failed")
)

// How a dependency was satisfied.
const (
	HowStore    = "resolved" // found in the index; its directory is in the RUNPATH
	HowLibc     = "libc"     // in the libc directory, found by the interpreter
	HowDriver   = "driver"   // an NVIDIA driver library, found through the driver link
	HowAbsolute = "absolute" // DT_NEEDED is an absolute path that exists
	HowIgnored  = "ignored"  // missing, but matched an ignore pattern
	HowMissing  = "missing"
	// HowFound is a name DiscoverDlopen found that the index resolves,
	// under DlopenReport, or in a file that does not import dlopen (its
	// callers get the directory, see dlopenCallers): reported, given no
	// RUNPATH entry in this file.
	HowFound = "found"
	// HowUnresolved is a name DiscoverDlopen found that nothing
	// satisfies: reported, never an error (it may be optional, or no
	// library name at all).
	HowUnresolved = "unresolved"
	// HowVersioned is a name DiscoverDlopen found without a version
	// ("libcudnn_graph.so") that no file has, where a file of that name
	// and a version does ("libcudnn_graph.so.9"): its caller appends the
	// version at run time. Under DlopenResolve its directory is in the
	// RUNPATH; it gets no note entry (the program never asks for the
	// unversioned name, and which version it asks for is not known).
	HowVersioned = "versioned"
)

// Where a dependency comes from (Dep.Source).
const (
	SourceNeeded  = "needed"        // DT_NEEDED
	SourceDlopen  = "dlopen"        // a .note.dlopen entry
	SourceStrings = "dlopen-string" // a string of a dlopen caller's read-only data (DiscoverDlopen)
)

// Dep is the decision about one dependency.
type Dep struct {
	Name   string `json:"name"`
	Source string `json:"source"` // SourceNeeded, SourceDlopen or SourceStrings
	How    string `json:"how"`
	Path   string `json:"path,omitempty"` // the library file chosen
	Dir    string `json:"dir,omitempty"`  // the directory it was found in
	// Entry is the RUNPATH entry that reaches Dir when it is not Dir
	// itself: an old $ORIGIN entry kept by WithPreserveOrigin, or Dir made
	// relative by WithRelativeRpaths or WithRelativizeRpath.
	Entry string `json:"entry,omitempty"`
	// Pattern is the first ignore-missing pattern that matches a
	// dependency nothing satisfied (or a driver library).
	Pattern string `json:"pattern,omitempty"`
	Hint    string `json:"hint,omitempty"`
	// From is, for a dlopen-string name this file did not find itself,
	// the file whose read-only data holds it: this file imports dlopen and
	// is in that file's DT_NEEDED closure, so it may be the caller that
	// dlopens the name (see dlopenCallers).
	From string `json:"from,omitempty"`

	// resolvedHow is how a HowFound name of a file that cannot call
	// dlopen was resolved (HowStore, HowVersioned), for its callers.
	resolvedHow string
}

// File is the decision about one file.
type File struct {
	Path           string       `json:"path"`
	Root           string       `json:"root,omitempty"` // the path to patch it was found under
	Kind           elfedit.Kind `json:"kind,omitempty"`
	Skipped        string       `json:"skipped,omitempty"`
	OldInterpreter string       `json:"old_interpreter,omitempty"`
	Interpreter    string       `json:"interpreter,omitempty"`
	OldRunPath     *string      `json:"old_runpath,omitempty"`
	OldRPath       *string      `json:"old_rpath,omitempty"`
	RunPath        string       `json:"runpath,omitempty"`
	// AsRPath says RunPath is written as DT_RPATH (WithForceRPath).
	AsRPath bool  `json:"as_rpath,omitempty"`
	Deps    []Dep `json:"deps,omitempty"`
	// ResolutionCache is the note written for the file's final RUNPATH
	// (see rpath/ldcache), Note what happened to it.
	ResolutionCache ldcache.Cache    `json:"resolution_cache,omitempty"`
	Note            string           `json:"note,omitempty"`
	Changed         bool             `json:"changed"`
	Strategy        elfedit.Strategy `json:"strategy,omitempty"`
	Written         int64            `json:"bytes_written,omitempty"`
	Errors          []string         `json:"errors,omitempty"`
	// DlopenError says why the names of dlopen discovery could not all be
	// read; the file is patched with those read before it.
	DlopenError string `json:"dlopen_error,omitempty"`
	// Symbols are the symbol check's findings (WithSymbols).
	Symbols []SymbolFinding `json:"symbols,omitempty"`

	dlopen  discovered // what dlopen discovery found (names, imports)
	edit    elfedit.Edit
	plan    *elfedit.Plan  // the prepared plan the write phase reuses, if kept
	claim   *elfedit.Claim // the file opened for writing and locked while decided
	strSize int            // dynamic string table size when decided, for the write phase's gate
	size    int64          // file size when decided, for the write phase's order
	skip    skipWhy
	target  Target // the interpreter's, for the reason of a skip
	machine elf.Machine
	osabi   elf.OSABI
	class   elf.Class
	loaded  *ldso.Object // what the symbol check's loader reads of it, as decided
}

// skipWhy says why a file was skipped, for auto-patchelf's SkipFile event.
type skipWhy int

const (
	skipNone skipWhy = iota
	skipNotELF
	skipNotRegular
	skipKind
	skipArch
	skipOSABI
)

// Missing is one unsatisfied dependency.
type Missing struct {
	Name string `json:"name"`
	File string `json:"file"`
	Hint string `json:"hint,omitempty"`
}

// Report is everything Patch decided, in sorted file order.
//
// Every file is counted exactly once: Changed + Unchanged + Skipped +
// Failed == len(Files). A file with an error (it could not be read, its
// RUNPATH failed the audit, or writing it failed) is Failed, never
// Unchanged or Changed; a file with a missing dependency is counted by its
// decision, and the dependency is in Missing.
type Report struct {
	Files   []*File   `json:"files"`
	Missing []Missing `json:"missing,omitempty"`
	// Changed counts the files written, or, when the write phase did not
	// run, the files that would have been.
	Changed   int `json:"changed"`
	Unchanged int `json:"unchanged"`
	Skipped   int `json:"skipped"`
	Failed    int `json:"failed"`
	// WritePhase says the files were written: every file was decided
	// without error or missing dependency, and it was no dry run.
	WritePhase bool `json:"write_phase"`
	// Written says every changed file was written (false after a dry run
	// or any error).
	Written bool `json:"written"`
	// SymbolErrors and SymbolWarnings count the symbol check's findings
	// of those severities (File.Symbols).
	SymbolErrors   int `json:"symbol_errors,omitempty"`
	SymbolWarnings int `json:"symbol_warnings,omitempty"`
}

// Patch patches every ELF file below the given paths (see the package
// documentation for the policy). It returns the report even on error; the
// error wraps ErrUnsatisfied, ErrAudit, or the first I/O or format error.
// Nothing is written unless every file was decided without error.
func Patch(ctx context.Context, paths []string, opts ...Option) (*Report, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	roots, err := absDirs("path", paths)
	if err != nil {
		return nil, err
	}
	files, below, dirs, err := collect(ctx, roots, c.recurse, c.jobs)
	defer func() {
		for _, d := range dirs {
			d.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	c.dirs = dirs
	if c.claims == nil {
		c.claims = newClaimBudget()
	}
	c.share = newShare(files, c.jobs)
	defer c.share.close()
	c.big = newBigGate(c.bigTable)
	ix, err := c.newIndex(ctx, c, roots, below)
	if err != nil {
		return nil, err
	}
	target := c.interpreterTarget()
	if target != nil && c.pageSize > 0 {
		// Every file Patch writes has the interpreter's machine: one
		// refusal for the run, not one a file.
		if msg := c.pageSizeProblem(target.Machine); msg != "" {
			return nil, errors.New(msg)
		}
	}
	// A dry run writes nothing, and a write that keeps old sections plans
	// afresh: no plan is kept for either.
	if !c.dryRun && !c.keepOld {
		c.kept = &planBudget{left: int64(max(c.jobs, 1)) * keptPlanPerJob}
	}
	rep := &Report{Files: make([]*File, len(files))}
	defer func() {
		for _, f := range rep.Files {
			if f != nil && f.claim != nil {
				f.claim.Close() // not written: released
			}
		}
	}()
	total := len(files)
	done := 0
	var mu sync.Mutex
	step := func() {
		if c.progress != nil {
			mu.Lock()
			done++
			c.progress(done, total*2)
			mu.Unlock()
		}
	}
	if err := c.big.gatedParallel(ctx, c.jobs, len(files), func(i int, held bool) bool {
		f := c.decideSafe(files[i], ix, target, held, nil)
		if f == nil {
			return false // a big file, while another is decided
		}
		rep.Files[i] = f
		step()
		return true
	}); err != nil {
		// Canceled: the report holds the files decided so far.
		rep.Files = slices.DeleteFunc(rep.Files, func(f *File) bool { return f == nil })
		return rep, err
	}
	if err := c.dlopenCallers(ctx, rep, files, ix, target); err != nil {
		return rep, err
	}
	c.logDecisions(ctx, rep.Files)
	var errs []error
	for _, f := range rep.Files {
		for _, d := range f.Deps {
			if d.How == HowMissing {
				rep.Missing = append(rep.Missing, Missing{Name: d.Name, File: f.Path, Hint: d.Hint})
			}
		}
		for _, e := range f.Errors {
			errs = append(errs, fileError(f.Path, e))
		}
		switch {
		case len(f.Errors) > 0:
			rep.Failed++
		case f.Skipped != "":
			rep.Skipped++
		case f.Changed:
			rep.Changed++
		default:
			rep.Unchanged++
		}
	}
	if len(rep.Missing) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d missing", ErrUnsatisfied, len(rep.Missing)))
	}
	if err := c.checkSymbols(ctx, rep); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 || c.dryRun {
		return rep, errors.Join(errs...)
	}
	rep.WritePhase = true
	var werrs []error
	var wmu sync.Mutex
	order := writeOrder(rep.Files)
	for range len(rep.Files) - len(order) {
		step() // nothing to write
	}
	if err := c.big.gatedParallel(ctx, c.jobs, len(order), func(i int, held bool) bool {
		f := rep.Files[order[i]]
		leave, ok := c.big.enter(f.strSize, held)
		if !ok {
			return false // written when the gate is free
		}
		defer leave()
		defer step()
		if c.beforeWrite != nil {
			c.beforeWrite(f.Path)
		}
		// Written through the descriptor decide opened below the root and
		// locked, which must still be the file at f.Path (elfedit.Claim).
		res, err := elfedit.EditFile(f.Path, f.edit, elfedit.Options{Sync: c.sync, NoFollow: true, Buffers: c.bufs, Prepared: f.plan, KeepOldSections: c.keepOld, Claim: f.claim})
		f.claim.Close()
		f.claim = nil
		c.kept.give(f.plan)
		reused := res != nil && f.plan != nil && res.Plan == f.plan
		f.plan = nil
		if err != nil {
			f.Errors = append(f.Errors, errMsg(f.Path, err))
			wmu.Lock()
			werrs = append(werrs, err)
			rep.Changed--
			rep.Failed++
			wmu.Unlock()
			return true
		}
		f.Strategy, f.Written = res.Plan.Strategy, res.Plan.Written
		c.log.Debug("patched", "file", f.Path, "runpath", f.RunPath, "strategy", f.Strategy, "planned", planned(reused))
		return true
	}); err != nil {
		return rep, err
	}
	rep.Written = len(werrs) == 0
	return rep, errors.Join(werrs...)
}

// planned says, for the debug log, how often a written file was planned:
// "once" when the write reused the plan decide made and kept, "again"
// when it planned the file anew (the plan was not kept, or the file
// changed since).
func planned(reused bool) string {
	if reused {
		return "once"
	}
	return "again"
}

// writeOrder lists the files to write, the largest first: the jobs take
// them in turn, and a large file taken last keeps one job busy while the
// others have nothing left to do (on 16 cores, the last tenth of a run
// had a few jobs running). Ties keep the order of the tree.
func writeOrder(files []*File) []int {
	var order []int
	for i, f := range files {
		if f.Changed {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(files[b].size, files[a].size) })
	return order
}

// The write phase writes the plans decide prepared when the files still
// hold the bytes they were made from (elfedit.File.Prepare: for a file
// unchanged since well before it was read, its identity and the bytes the
// write takes from it say so; for another, every byte read again), instead
// of reading, planning and verifying every file a second time. What a kept
// plan holds is live until the write phase, so it is bounded: a plan
// holding more than keptPlanMax, or one past keptPlanPerJob times the jobs
// for the whole run, is dropped and its file planned again when written.
// A kept plan holds what it writes as pieces (elfedit's detach.go): the
// file's bytes by offset and only what is new as bytes of its own, about
// 4 KiB a file on this machine's /usr/lib and /usr/bin (5.0 MB for 1,210
// files, where copies of what they write took 38.7 MB). At 1 MiB a job, a
// budget sized for copies, 2 jobs kept 380 of those plans; at 4 MiB every
// one whose tables the read cache held (the five largest files read
// theirs past it, and are planned again), peak RSS unchanged (58–59 MiB:
// the heap limit, not the plans, sets it) and the write phase's CPU about
// 250 → 145 ms a run (pprof). The budget grows with the jobs, as
// cmd/cudapatch's heap limit does.
const (
	keptPlanMax    = 256 << 10
	keptPlanPerJob = 4 << 20
	// keptPlanMin is what a budget must have left to be worth asking:
	// less than a small file's plan holds.
	keptPlanMin = 2 << 10
)

// planBudget counts the bytes the kept plans may still take.
type planBudget struct {
	mu   sync.Mutex
	left int64
}

// take reports whether a plan holding held bytes may be kept, and if so
// counts it; asked with 0 (elfedit.File.Prepare does before it detaches a
// plan), whether the budget has keptPlanMin left. A nil budget keeps
// nothing.
func (b *planBudget) take(held int64) bool {
	if b == nil || held > keptPlanMax {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if held == 0 {
		return b.left >= keptPlanMin
	}
	if held > b.left {
		return false
	}
	b.left -= held
	return true
}

// give returns what a kept plan took (nothing for nil).
func (b *planBudget) give(p *elfedit.Plan) {
	if b != nil && p != nil {
		b.mu.Lock()
		b.left += p.HeldBytes()
		b.mu.Unlock()
	}
}

// parallel runs fn(0..n-1) on jobs goroutines, stopping early when ctx ends.
// Each goroutine takes the next index from a shared counter: a channel
// would hand every item over through the scheduler, a wake-up per file.
func parallel(ctx context.Context, jobs, n int, fn func(int)) error {
	var next atomic.Int64
	var stopped atomic.Bool
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			if ctx.Err() != nil {
				stopped.Store(true)
				return
			}
			fn(i)
		}
	}
	runWorkers(min(jobs, n), work)
	if stopped.Load() {
		return ctx.Err()
	}
	return nil
}

// runWorkers runs work on k goroutines, the caller being the last, and
// returns when all have returned.
func runWorkers(k int, work func()) {
	var wg sync.WaitGroup
	for range k - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	if k > 0 {
		work()
	}
	wg.Wait()
}

// found is a file to patch and the path to patch it was found under.
type found struct{ path, root string }

// collect lists the regular files below the roots, root by root, each
// root's files in sorted order (walkTree, jobs directories at a time), and,
// when it recurses, the directories below each root that is a directory,
// for the index. Symbolic links are never followed: a link may point out
// of the tree being patched. It opens each root that is a directory (and
// the directory of each that is a file): what Patch opens to decide and
// write below a root, it opens from that directory's descriptor without
// following a link (confine.Dir), so a directory swapped for a link out of
// the tree while the job runs is not followed. The caller closes them.
func collect(ctx context.Context, roots []string, recurse bool, jobs int) ([]found, map[string][]string, []*confine.Dir, error) {
	var out []found
	var opened []*confine.Dir
	below := map[string][]string{}
	for _, r := range roots {
		st, err := os.Lstat(r)
		if err != nil {
			return nil, nil, opened, err
		}
		if st.Mode().IsRegular() || special(st.Mode().Type()) {
			d, err := confine.Open(filepath.Dir(r))
			if err != nil {
				return nil, nil, opened, err
			}
			opened = append(opened, d)
			out = append(out, found{r, r})
			continue
		}
		if !st.IsDir() {
			continue
		}
		d, err := confine.Open(r)
		if err != nil {
			return nil, nil, opened, err
		}
		opened = append(opened, d)
		files, dirs, err := walkTree(ctx, d, jobs, recurse)
		if err != nil {
			return nil, nil, opened, err
		}
		for _, p := range files {
			out = append(out, found{p, r})
		}
		if recurse {
			below[r] = dirs
		}
	}
	// A file reached from two roots (a directory and a file below it) is
	// decided once, under the first: two decisions would claim it twice
	// (the second finding it locked) and write it twice.
	seen := make(map[string]bool, len(out))
	out = slices.DeleteFunc(out, func(f found) bool {
		dup := seen[f.path]
		seen[f.path] = true
		return dup
	})
	return out, below, opened, nil
}

// dirOf is the opened root (collect) path lies below, the deepest if
// several; nil if none.
func (c *config) dirOf(path string) *confine.Dir {
	var best *confine.Dir
	for _, d := range c.dirs {
		if _, err := d.Rel(path); err == nil && (best == nil || len(d.Path()) > len(best.Path())) {
			best = d
		}
	}
	return best
}

// claimBudget bounds the claims (elfedit.Claim) decide keeps open for the
// write phase: a descriptor each. Past it a claim is released after
// deciding, and taken again, checked, when its file is written.
type claimBudget struct{ left atomic.Int64 }

// claimReserve is the descriptors left to everything else: the jobs'
// reads, the index's, the runtime's.
const claimReserve = 512

func newClaimBudget() *claimBudget {
	b := &claimBudget{}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur > claimReserve {
		b.left.Store(int64(min(lim.Cur-claimReserve, 1<<30)))
	}
	return b
}

// take reports whether one more claim may stay open.
func (b *claimBudget) take() bool {
	return b != nil && b.left.Add(-1) >= 0
}

// interpreterTarget is the interpreter's architecture, nil when there is
// no interpreter or it cannot be read (then no file is skipped for its
// architecture).
func (c *config) interpreterTarget() *Target {
	if c.interpreter == "" {
		return nil
	}
	f, err := c.bufs.Open(c.interpreter)
	if err != nil {
		return nil
	}
	defer f.Close()
	return &Target{Class: f.Header.Class, Machine: f.Header.Machine, OSABI: f.Header.OSABI}
}

// decideSafe is decide, with a bug in the reader reported against the file
// instead of killing a whole build.
func (c *config) decideSafe(fd found, ix resolver, t *Target, held bool, inherit []Dep) (out *File) {
	defer func() {
		if r := recover(); r != nil {
			out = &File{Path: fd.path, Root: fd.root, Errors: []string{fmt.Sprintf("internal error (please report): %v", r)}}
		}
	}()
	return c.decide(fd, ix, t, held, inherit)
}

// decide reads one file and works out its new interpreter and RUNPATH.
// inherit are the dlopen-string names of other files this one may be the
// dlopen caller of (dlopenCallers), resolved there. A file with a big string table needs the gate (bigGate), which held
// says is taken for it: when it is not and the gate is taken, decide
// closes the file and returns nil, and is called again with the gate
// held.
func (c *config) decide(fd found, ix resolver, t *Target, held bool, inherit []Dep) *File {
	path := fd.path
	out := &File{Path: path, Root: fd.root}
	f := c.share.take(path) // read by a probe already, or nil
	var err error
	if f == nil {
		f, err = c.open(path, true)
	}
	if err != nil {
		switch {
		case errors.Is(err, elfedit.ErrNotELF):
			out.Skipped = SkippedNotELF
			out.skip = skipNotELF
		case errors.Is(err, elfedit.ErrNotRegular):
			// A FIFO, socket or device (refused before it is opened).
			out.Skipped = elfedit.ErrNotRegular.Error()
			out.skip = skipNotRegular
		default:
			out.Errors = append(out.Errors, errMsg(path, err))
		}
		return out
	}
	// A file with a big string table is decided alone (see bigGate). When
	// another one is being decided, it is closed, so that it holds no big
	// buffers while it waits, and read again when its turn comes. Every
	// other file is read once.
	leave, ok := c.big.enter(f.StringTableSize(), held)
	if !ok {
		f.Close()
		return nil
	}
	defer leave()
	defer f.Close()
	info := f.Info()
	c.share.seed(path, f)
	out.strSize, out.size = f.StringTableSize(), f.Size()
	out.Kind = info.Kind
	out.OldInterpreter, out.OldRunPath, out.OldRPath = info.Interpreter, info.RunPath, info.RPath
	machine, osabi := info.ELFMachine(), info.ELFOSABI()
	out.machine, out.osabi, out.class = machine, osabi, info.ELFClass()
	if why, reason := skipOf(info, t); why != skipNone {
		out.Skipped, out.skip = reason, why
		if t != nil {
			out.target = *t
		}
		return out
	}
	out.loaded = c.loadedObject(f)
	// FreeBSD and OpenBSD ship ld.so apart from libc in nixpkgs: libc must
	// get its RUNPATH entry there (auto-patchelf forces keep-libc too).
	keepLibc := c.keepLibc || osabi == elf.ELFOSABI_FREEBSD || osabi == elf.ELFOSABI_OPENBSD

	noteNames, needsDriver, ok := c.resolveDeps(f, info, ix, keepLibc, inherit, out)
	if !ok {
		return out
	}
	c.planRunpath(fd, info, needsDriver, out)

	var e elfedit.Edit
	if out.RunPath != "" {
		rp := out.RunPath
		e.SetPath = &rp
		if c.forceRPath {
			e.Tag, out.AsRPath = elfedit.TagRPath, true
		}
	} else if c.shrinkKept {
		shrinkKept(info, &e)
		if e.SetPath != nil {
			out.RunPath = *e.SetPath
		}
	}
	if info.Interpreter != "" && c.interpreter != "" {
		ip := c.interpreter
		e.Interpreter = &ip
		out.Interpreter = ip
	}
	out.ResolutionCache, out.Note, err = c.resolutionNote(f, noteNames, finalPath(info, &e), &e)
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
		return out
	}
	// Prepare verifies the planned result now wherever the read cache
	// held the file's tables, so a verifier failure stops the tree before
	// anything is written. The write phase reuses the plans the budget
	// keeps; it plans and verifies the others again.
	plan, err := f.Prepare(e, c.kept.take)
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
		return out
	}
	out.Changed = !plan.IsNoOp()
	out.Strategy = plan.Strategy
	if msg := c.pageSizeProblem(machine); out.Changed && msg != "" {
		out.Errors = append(out.Errors, msg)
		return out
	}
	out.edit = e
	if out.Changed && plan.Prepared() {
		out.plan = plan
	}
	// EditFile refuses a file with other hard links (writing it would
	// change them too); finding out now, before anything is written,
	// keeps the rule that a tree is written only when every file can be.
	if n := linkCount(path); out.Changed && n > 1 {
		out.Errors = append(out.Errors, fmt.Sprintf("%v (%d links): refusing to change the other paths too", elfedit.ErrHardLinks, n))
		return out
	}
	// So does opening it for writing now, and locking it until it is
	// written (claim).
	if out.Changed {
		c.claim(f, out)
	}
	return out
}

// resolveDeps resolves what f needs, into out.Deps: DT_NEEDED in order,
// then .note.dlopen entries, then (with --dlopen) the names its read-only
// data spells. It returns the names the resolution note answers and
// whether a driver library is among them; ok is false when a name could
// not be resolved at all (the error is in out.Errors).
func (c *config) resolveDeps(f *elfedit.File, info elfedit.Info, ix resolver, keepLibc bool, inherit []Dep, out *File) (noteNames []string, needsDriver, ok bool) {
	class, machine, osabi := info.ELFClass(), info.ELFMachine(), info.ELFOSABI()
	type want struct {
		alts   []string
		source string
	}
	var wants []want
	for _, n := range info.Needed {
		wants = append(wants, want{[]string{n}, SourceNeeded})
	}
	for _, d := range info.Dlopen {
		if len(d.Soname) > 0 {
			wants = append(wants, want{d.Soname, SourceDlopen})
		}
	}
	// Then the names a dlopen caller's read-only data spells (none when
	// a .note.dlopen says what it dlopens: the note is authoritative).
	if c.dlopen != DlopenOff {
		// The names are a hint: a file whose read-only data cannot be
		// read (a section header past its end) is patched without them,
		// and says why.
		d, err := discoverDlopen(f, false)
		if err != nil {
			out.DlopenError = err.Error()
		}
		out.dlopen = d
		for _, n := range d.names {
			wants = append(wants, want{[]string{n}, SourceStrings})
		}
	}
	needsDriver = false
	noteNames = slices.Clone(info.Needed) // what the resolution note answers
	for _, w := range wants {
		dep, err := c.resolve(w.alts, ix, class, machine, osabi, keepLibc, w.source != SourceStrings)
		if err != nil {
			out.Errors = append(out.Errors, err.Error())
			return nil, false, false
		}
		dep.Source = w.source
		if w.source == SourceStrings {
			if dep, err = c.resolveVersioned(dep, ix, class, machine, osabi); err != nil {
				out.Errors = append(out.Errors, err.Error())
				return nil, false, false
			}
			switch {
			case dep.How == HowMissing:
				dep.How = HowUnresolved
			case c.dlopen == DlopenReport && dep.How == HowStore:
				dep.How = HowFound
			case c.dlopen == DlopenResolve && (dep.How == HowStore || dep.How == HowDriver):
				noteNames = append(noteNames, dep.Name)
			}
		}
		// A .note.dlopen name gets its note entry as a DT_NEEDED does.
		if w.source == SourceDlopen && (dep.How == HowStore || dep.How == HowDriver) && !slices.Contains(noteNames, dep.Name) {
			noteNames = append(noteNames, dep.Name)
		}
		if dep.How == HowDriver && (w.source != SourceStrings || c.dlopen == DlopenResolve) {
			needsDriver = true
		}
		out.Deps = append(out.Deps, dep)
	}
	// Then the names this file may dlopen for others: their directories,
	// after its own; no note entry (lint reads a file's note against its
	// own names).
	for _, d := range inherit {
		if slices.ContainsFunc(out.Deps, func(o Dep) bool { return o.Name == d.Name }) {
			continue
		}
		d.Entry = ""
		out.Deps = append(out.Deps, d)
		if d.How == HowDriver {
			needsDriver = true
		}
	}
	return noteNames, needsDriver, true
}

// planRunpath sets out.RunPath in policy order: cuda_compat and the driver
// link, the runtime dependencies, the resolved directories, the appended
// entries, the old $ORIGIN ones kept; and audits every entry.
func (c *config) planRunpath(fd found, info elfedit.Info, needsDriver bool, out *File) {
	path, machine := fd.path, info.ELFMachine()
	// The RUNPATH, in policy order. The cuda_compat directory and the
	// driver link come first and are never made relative: they are not in
	// the package's closure.
	var fixed, entries []string
	driver := c.driverLinkFor == DriverLinkAll || c.driverLinkFor == DriverLinkNeeded && needsDriver
	if driver {
		if c.cudaCompat != "" && machine != elf.EM_386 {
			fixed = append(fixed, c.cudaCompat)
		}
		if machine == elf.EM_386 {
			fixed = append(fixed, c.driverLink32)
		} else {
			fixed = append(fixed, c.driverLink)
		}
	}
	if info.Interpreter != "" {
		entries = append(entries, c.runtimeDeps...)
	}
	old := runpathDirs(info)
	for i, d := range out.Deps {
		if d.How != HowStore && d.How != HowVersioned {
			continue
		}
		e := d.Dir
		if c.preserveOrigin {
			if o := sameDirOrigin(path, d.Dir, old); o != "" {
				e = o
			}
		}
		entries = append(entries, e)
		out.Deps[i].Entry = e
	}
	entries = append(entries, c.appendRunpaths...)
	if c.preserveOrigin {
		// Every old $ORIGIN entry, also those no dependency needed (a
		// dlopen target), after the appended ones, as auto-patchelf does.
		for _, e := range old {
			if isOrigin(e) {
				entries = append(entries, e)
			}
		}
	}
	if within := c.relativeWithin(fd); within != "" {
		for i, e := range entries {
			entries[i] = relativeEntry(path, e, within)
		}
		for i, d := range out.Deps {
			if d.Entry != "" {
				out.Deps[i].Entry = relativeEntry(path, d.Entry, within)
			}
		}
	}
	for i, d := range out.Deps {
		if d.Entry == d.Dir {
			out.Deps[i].Entry = ""
		}
	}
	entries = dedupe(append(fixed, entries...))
	out.RunPath = strings.Join(entries, ":")
	for _, e := range entries {
		if msg := c.audit(e); msg != "" {
			out.Errors = append(out.Errors, fmt.Sprintf("%v: RUNPATH entry %q %s", ErrAudit, e, msg))
		}
	}
}

// claim opens f for writing and locks it until it is written: a file this
// user may not write, or that another run (or any writer that locks)
// holds, fails before anything is written. A dry run only asks, and lets
// go.
func (c *config) claim(f *elfedit.File, out *File) {
	cl, err := f.Claim()
	switch {
	case err != nil:
		out.Errors = append(out.Errors, err.Error())
	case c.dryRun:
		cl.Close()
	default:
		if !c.claims.take() {
			cl.Release()
		}
		out.claim = cl
	}
}

// linkCount is the number of hard links of path, 0 if unknown.
func linkCount(path string) uint64 {
	st, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Nlink)
	}
	return 0
}

// resolve satisfies one dependency, given its alternatives (one name for
// DT_NEEDED, several for a .note.dlopen entry). The error says the index
// could not be searched far enough to decide.
// A missing one gets a hint when hint says so: the hint reads the headers
// of every library of the index.
func (c *config) resolve(alts []string, ix resolver, class elf.Class, machine elf.Machine, osabi elf.OSABI, keepLibc, hint bool) (Dep, error) {
	for _, name := range alts {
		switch {
		case c.driverLibs.match(name):
			return Dep{Name: name, How: HowDriver, Pattern: c.ignorePattern(name, nil)}, nil
		case filepath.IsAbs(name):
			if _, err := os.Stat(name); err == nil {
				return Dep{Name: name, How: HowAbsolute, Path: name}, nil
			}
		case !keepLibc && c.libcDir != "" && c.inLibc(name):
			return Dep{Name: name, How: HowLibc, Path: filepath.Join(c.libcDir, name)}, nil
		}
		cand, ok, err := ix.lookup(name, class, machine, osabi)
		if err != nil {
			return Dep{}, fmt.Errorf("resolving %s: %w", name, err)
		}
		if ok {
			return Dep{Name: name, How: HowStore, Path: cand.path, Dir: cand.dir}, nil
		}
		// With keep-libc, a libc name no search directory has is still
		// found by the interpreter (auto-patchelf.py's "step 4").
		if keepLibc && c.libcDir != "" && !filepath.IsAbs(name) && c.inLibc(name) {
			return Dep{Name: name, How: HowLibc, Path: filepath.Join(c.libcDir, name)}, nil
		}
	}
	// A .note.dlopen entry with several alternatives is named as
	// auto-patchelf names it, "any(a, b)". Ignore patterns match that name
	// or any one alternative.
	name := alts[0]
	if len(alts) > 1 {
		name = "any(" + strings.Join(alts, ", ") + ")"
	}
	if p := c.ignorePattern(name, alts); p != "" {
		return Dep{Name: name, How: HowIgnored, Pattern: p}, nil
	}
	if !hint {
		return Dep{Name: name, How: HowMissing}, nil
	}
	return Dep{Name: name, How: HowMissing, Hint: ix.sonameHint(alts[0], class, machine, osabi)}, nil
}

// resolveVersioned resolves a dlopen-string name found nowhere (or
// ignored as such) that has
// no version ("libX.so") to the first file of the index, in its
// precedence, that has a version ("libX.so.9"): HowVersioned under
// DlopenResolve, HowFound under DlopenReport. Any other dep is returned as
// it is.
func (c *config) resolveVersioned(dep Dep, ix resolver, class elf.Class, machine elf.Machine, osabi elf.OSABI) (Dep, error) {
	prefix := unversioned(dep.Name)
	// An ignore pattern is for what is found nowhere: a versioned file
	// found wins over it.
	if dep.How != HowMissing && dep.How != HowIgnored || prefix == "" {
		return dep, nil
	}
	cand, ok, err := ix.lookupVersioned(prefix, class, machine, osabi)
	if err != nil {
		return dep, fmt.Errorf("resolving %s: %w", dep.Name, err)
	}
	if !ok {
		return dep, nil
	}
	how := HowVersioned
	if c.dlopen == DlopenReport {
		how = HowFound
	}
	return Dep{Name: dep.Name, Source: dep.Source, How: how, Path: cand.path, Dir: cand.dir}, nil
}

// ignorePattern returns the first ignore-missing pattern that matches the
// basename of name or of one of alts, or "".
func (c *config) ignorePattern(name string, alts []string) string {
	for _, p := range c.ignoreMissing {
		if p.Match(filepath.Base(name)) {
			return p.String()
		}
		for _, a := range alts {
			if p.Match(filepath.Base(a)) {
				return p.String()
			}
		}
	}
	return ""
}

// osabiCompatible is auto-patchelf's rule: equal, or either side SYSV
// (ELFOSABI_NONE, "unspecified") — GNU/Linux files load with SYSV ones.
func osabiCompatible(a, b elf.OSABI) bool {
	return a == b || a == elf.ELFOSABI_NONE || b == elf.ELFOSABI_NONE || a == elf.ELFOSABI_LINUX && b == elf.ELFOSABI_LINUX
}

// fileError is one error of a file's report as an error; an audit failure
// wraps ErrAudit, so that callers can tell it from an I/O or format error.
func fileError(path, msg string) error {
	if rest, ok := strings.CutPrefix(msg, ErrAudit.Error()); ok {
		return fmt.Errorf("%s: %w%s", path, ErrAudit, rest)
	}
	return fmt.Errorf("%s: %s", path, msg)
}

// errMsg is err's text without the file's path, which the report carries
// once.
func errMsg(path string, err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return pe.Op + ": " + pe.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), path+": ")
}

// inLibc says whether the libc directory has name. Every file asks for
// the same few names (libc.so.6, libm.so.6...): each is looked up once.
func (c *config) inLibc(name string) bool {
	if v, ok := c.libcHas.Load(name); ok {
		return v.(bool)
	}
	ok := exists(filepath.Join(c.libcDir, name))
	c.libcHas.Store(name, ok)
	return ok
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// dedupe drops empty and repeated entries; the first of each wins.
func dedupe(entries []string) []string {
	seen := map[string]bool{}
	return slices.DeleteFunc(slices.Clone(entries), func(e string) bool {
		if e == "" || seen[e] {
			return true
		}
		seen[e] = true
		return false
	})
}

// audit says what is wrong with a RUNPATH entry, or "".
func (c *config) audit(e string) string {
	if strings.HasPrefix(e, "$ORIGIN") || strings.HasPrefix(e, "${ORIGIN}") {
		return ""
	}
	if !filepath.IsAbs(e) {
		return "is relative: the loader resolves it against the current directory"
	}
	for _, b := range c.buildDirs {
		if b != "" && (e == b || strings.HasPrefix(e, strings.TrimSuffix(b, "/")+"/")) {
			return "points into the build directory " + b
		}
	}
	if IsStubDir(e) {
		return "is a stub directory: its libcuda would be loaded instead of the driver's"
	}
	return ""
}
