package patch

import (
	"cmp"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/policy"

	"github.com/cudapatch/cudapatch/internal/confine"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// Errors Run returns, wrapped; the CLI maps them to exit codes.
var (
	// ErrUnsatisfied means some dependency was found nowhere and matched no
	// ignore pattern.
	ErrUnsatisfied = errors.New("unsatisfied dependencies")
)

// File is the decision about one file: a row of the report. The run's
// work on the file lives beside it (fileWork), and ends with the run.
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
	// AsRPath says RunPath is written as DT_RPATH (policy.Config.ForceRPath).
	AsRPath bool         `json:"as_rpath,omitempty"`
	Deps    []policy.Dep `json:"deps,omitempty"`
	// ResolutionCache is the note written for the file's final RUNPATH
	// (see rpath/ldcache), Note what happened to it.
	ResolutionCache ldcache.Cache    `json:"resolution_cache,omitempty"`
	Note            string           `json:"note,omitempty"`
	Changed         bool             `json:"changed"`
	Strategy        elfedit.Strategy `json:"strategy,omitempty"`
	Written         int64            `json:"bytes_written,omitempty"`
	Errors          []FileError      `json:"errors,omitempty"`
	Checked
	// SameFileAs is, for a name of a file with several hard links, all
	// of them in the outputs and all getting the same edit, the name the
	// file is written and counted under (the first in the report's
	// order); the file is patched once, in place, and this name with it.
	SameFileAs string `json:"same_file_as,omitempty"`

	// facts are what the file is, as the reasons of a skip name it
	// (AutoPatchelfEvents, SkippedForTarget); not reported as such.
	facts fileFacts
}

// Checked is what the two checks of the job found in a file; its fields
// are the row's own in JSON.
type Checked struct {
	// DlopenError says why the names of dlopen discovery could not all be
	// read; the file is patched with those read before it.
	DlopenError string `json:"dlopen_error,omitempty"`
	// Symbols are the symbol check's findings (Config.Symbols).
	Symbols []SymbolFinding `json:"symbols,omitempty"`
}

// fileFacts are the ELF identity of a file and why it was skipped, if it
// was: the words of auto-patchelf's skip reasons come from them.
type fileFacts struct {
	skip    policy.Skip
	target  policy.Target // the interpreter's, for the reason of a skip
	machine elf.Machine
	osabi   elf.OSABI
	class   elf.Class
}

// fileWork is what the run keeps of a file between its phases: its report
// row (File), and beside it what only the run needs, dropped when the run
// ends.
type fileWork struct {
	*File
	dlopen policy.Discovered // what dlopen discovery found (names, imports)
	// addNeeded are the DT_NEEDED names the edit adds (Config.DlopenNeeded).
	addNeeded []string
	edit      elfedit.Edit
	// pending is the edit as decided, for the write phase: the plan kept
	// for it, if any, and the claim (the file opened for writing and
	// locked while decided).
	pending *elfedit.Pending
	strSize int          // dynamic string table size when decided, for the write phase's gate
	size    int64        // file size when decided, for the write phase's order
	loaded  *ldso.Object // what the symbol check's loader reads of it, as decided
	// ident is the file's identity when it has several hard links
	// (Links > 1), by which hardLinks finds its other names.
	ident elfedit.Identity
	// aliases are the file's other names, written with it (hardLinks).
	aliases []*fileWork
	// claimedAs is the name the claim was taken under, when it is not Path
	// (another name of the file got there first: hardLinks).
	claimedAs string
}

// Missing is one unsatisfied dependency.
type Missing struct {
	Name string `json:"name"`
	File string `json:"file"`
	Hint string `json:"hint,omitempty"`
}

// Report is everything Run decided, in sorted file order.
//
// Every file is counted exactly once: Changed + Unchanged + Skipped +
// Failed + Linked == len(Files). A file with an error (it could not be
// read, its RUNPATH failed the audit, or writing it failed) is Failed,
// never Unchanged or Changed; a file with a missing dependency is counted
// by its decision, and the dependency is in Missing. A file with several
// hard links, all in the outputs, is counted once, under its first name
// (File.SameFileAs); its other names are Linked.
type Report struct {
	Files   []*File   `json:"files"`
	Missing []Missing `json:"missing,omitempty"`
	// Changed counts the files written, or, when the write phase did not
	// run, the files that would have been.
	Changed   int `json:"changed"`
	Unchanged int `json:"unchanged"`
	Skipped   int `json:"skipped"`
	Failed    int `json:"failed"`
	// Linked counts the names of a changed file counted under another
	// of its names (File.SameFileAs): hard links, patched with it.
	Linked int `json:"linked,omitempty"`
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

// Run patches every ELF file below the given paths (rpath/policy says
// how). It returns the report even on error; the error wraps
// ErrUnsatisfied, policy.ErrAudit, or the first I/O or format error.
// Nothing is written unless every file was decided without error.
//
// Its phases: collect the files and index the libraries; decide each
// file; link the dlopen callers to the names other files hold; tally the
// report; check the symbols of the closures as decided; write.
//
// Run validates cfg first (Config.Validate) and returns its error before
// it reads anything; a nil cfg is the zero Config. cfg is not changed.
func Run(ctx context.Context, cfg *Config, paths []string) (*Report, error) {
	rc, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	c := newJob(rc)
	if err := c.prepareCompat(ctx); err != nil {
		return nil, err
	}
	roots, err := absDirs("path", paths)
	if err != nil {
		return nil, err
	}
	files, below, dirs, err := collect(ctx, roots, c.recurse, c.jobs, c.log)
	defer func() {
		for _, d := range dirs {
			d.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	ix, target, err := c.start(ctx, files, dirs, roots, below)
	if err != nil {
		return nil, err
	}
	defer c.share.close()
	work := make([]*fileWork, len(files))
	defer func() {
		for _, w := range work {
			if w != nil {
				w.pending.Close() // not written: its claim released
			}
		}
	}()
	step := c.stepper(len(files))
	rep := &Report{}
	if err := c.decideAll(ctx, files, ix, target, work, step); err != nil {
		// Canceled: the report holds the files decided so far.
		rep.Files = rows(slices.DeleteFunc(work, func(w *fileWork) bool { return w == nil }))
		return rep, err
	}
	err = c.dlopenCallers(ctx, work, files, ix, target)
	rep.Files = rows(work)
	if err != nil {
		return rep, err
	}
	c.hardLinks(work)
	c.logDecisions(ctx, rep.Files)
	if c.decided != nil {
		n := 0
		for _, f := range work {
			if f.Kind != "" {
				n++
			}
		}
		c.decided(n)
	}
	errs := tally(rep)
	if err := c.checkSymbols(ctx, rep, work); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 || c.dryRun {
		return rep, errors.Join(errs...)
	}
	rep.WritePhase = true
	return rep, c.write(ctx, rep, work, step)
}

// start readies the run's shared state for the files collect found: the
// directories they are opened below, the probes' share of open files, the
// gate of big string tables, the symbol check, the library index, the
// interpreter's target, and the budget of kept plans.
func (c *job) start(ctx context.Context, files []found, dirs []*confine.Dir, roots []string, below map[string][]string) (resolver, *policy.Target, error) {
	c.dirs = dirs
	c.share = newShare(files, c.jobs)
	c.big = newBigGate(c.bigTable)
	c.sym = c.newSymbolCheck()
	ix, err := c.index(ctx, roots, below)
	if err != nil {
		c.share.close()
		return nil, nil, err
	}
	target := c.interpreterTarget()
	if target != nil && c.pageSize > 0 {
		// Every file Run writes has the interpreter's machine: one
		// refusal for the run, not one a file.
		if msg := c.pageSizeProblem(target.Machine); msg != "" {
			c.share.close()
			return nil, nil, errors.New(msg)
		}
	}
	// A dry run writes nothing, and a write that keeps old sections plans
	// afresh: no plan is kept for either. With the symbol check on, the
	// plans are kept through it too: a few KiB a file, for which cudapatch
	// raises its heap limit with the files decided (Config.Decided), so
	// that they do not crowd the check's tables.
	if !c.dryRun && !c.keepOld {
		c.kept = &planBudget{left: int64(max(c.jobs, 1)) * keptPlanPerJob}
	}
	return ix, target, nil
}

// stepper returns the progress callback's step: one for each file
// decided and one for each written (or with nothing to write).
func (c *job) stepper(total int) func() {
	var mu sync.Mutex
	done := 0
	return func() {
		if c.progress != nil {
			mu.Lock()
			done++
			c.progress(done, total*2)
			mu.Unlock()
		}
	}
}

// decideAll decides every file into work, in parallel; a big file waits
// for the gate (bigGate). It stops early only when ctx ends.
func (c *job) decideAll(ctx context.Context, files []found, ix resolver, target *policy.Target, work []*fileWork, step func()) error {
	return c.big.gatedParallel(ctx, c.jobs, len(files), func(i int, held bool) bool {
		f := c.decideSafe(files[i], ix, target, held, nil, nil)
		if f == nil {
			return false // a big file, while another is decided
		}
		work[i] = f
		step()
		return true
	})
}

// tally counts the report's files by outcome and lists its missing
// dependencies; it returns the errors they make (each file's, and
// ErrUnsatisfied).
func tally(rep *Report) []error {
	var errs []error
	for _, f := range rep.Files {
		for _, d := range f.Deps {
			if d.How == policy.HowMissing {
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
		case f.SameFileAs != "":
			rep.Linked++
		case f.Changed:
			rep.Changed++
		default:
			rep.Unchanged++
		}
	}
	if len(rep.Missing) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d missing", ErrUnsatisfied, len(rep.Missing)))
	}
	return errs
}

// rows are the report rows of work, in its order.
func rows(work []*fileWork) []*File {
	out := make([]*File, len(work))
	for i, w := range work {
		out[i] = w.File
	}
	return out
}

// write is the write phase: every changed file of work, the largest first,
// through the plan and the claim decide kept for it, if any. A file that
// fails is counted failed instead of changed; rep.Written says none did.
func (c *job) write(ctx context.Context, rep *Report, work []*fileWork, step func()) error {
	var werrs []error
	var wmu sync.Mutex
	order := writeOrder(work)
	for range len(work) - len(order) {
		step() // nothing to write
	}
	written := make([]bool, len(order)) // each index by the one job that takes it
	if err := c.big.gatedParallel(ctx, c.jobs, len(order), func(i int, held bool) bool {
		f := work[order[i]]
		leave, ok := c.big.enter(f.strSize, held)
		if !ok {
			return false // written when the gate is free
		}
		defer leave()
		defer step()
		written[i] = true
		if c.beforeWrite != nil {
			c.beforeWrite(f.Path)
		}
		// Written through the descriptor decide opened below the root and
		// locked, which must still be the file at f.Path
		// (elfedit.Pending.Claim), with the plan decide kept.
		opt := elfedit.Options{Sync: c.sync, NoFollow: true, KeepOldSections: c.keepOld}
		opt.Links = c.otherLinks(f)
		if c.writeHook != nil {
			opt = elfedit.WithHook(opt, func(at string) { c.writeHook(f.Path, at) })
		}
		res, err := f.pending.Commit(opt)
		c.kept.give(f.pending)
		f.pending = nil
		reused := res != nil && res.Reused
		if err != nil {
			f.addError(ErrorWrite, withoutPath(f.Path, err))
			wmu.Lock()
			werrs = append(werrs, err)
			rep.Changed--
			rep.Failed++
			// Its other names were not patched either: each says so.
			for _, a := range f.aliases {
				a.addError(ErrorWrite, fmt.Errorf("not written: it is a hard link of %s, whose write failed", f.Path))
				rep.Linked--
				rep.Failed++
			}
			wmu.Unlock()
			return true
		}
		f.Strategy, f.Written = res.Plan.Strategy, res.Plan.Written
		for _, a := range f.aliases {
			a.Strategy = f.Strategy
		}
		c.log.Debug("patched", "file", f.Path, "runpath", f.RunPath, "strategy", f.Strategy, "planned", planned(reused))
		return true
	}); err != nil {
		// Stopped (ctx): each file taken was written to the end; the
		// others are left as they are, and counted failed.
		for i, k := range order {
			if f := work[k]; !written[i] {
				f.addError(ErrorWrite, fmt.Errorf("not written (%w); left as it is", context.Cause(ctx)))
				rep.Changed--
				rep.Failed++
			}
		}
		return err
	}
	rep.Written = len(werrs) == 0
	return errors.Join(werrs...)
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
// others have nothing left to do. Ties keep the order of the tree.
func writeOrder(files []*fileWork) []int {
	var order []int
	for i, f := range files {
		if f.Changed && f.SameFileAs == "" {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(files[b].size, files[a].size) })
	return order
}

// The write phase writes the plans decide prepared when the files still
// hold the bytes they were made from (elfedit.Batch.Prepare: for a file
// unchanged since well before it was read, its identity and the bytes the
// write takes from it say so; for another, every byte read again), instead
// of reading, planning and verifying every file a second time. What a kept
// plan holds is live until the write phase, so it is bounded: a plan
// holding more than keptPlanMax, or one past keptPlanPerJob times the jobs
// for the whole run, is dropped and its file planned again when written.
// A kept plan holds its file's bytes by offset and only what is new as
// bytes of its own (elfedit's detach.go), a few KiB a file, so the
// budget keeps the plans of nearly every file whose tables the read cache
// held. It grows with the jobs, as cmd/cudapatch's heap limit does.
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
// counts it; asked with 0 (elfedit.Batch.Prepare does before it detaches
// a plan), whether the budget has keptPlanMin left. A nil budget keeps
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

// give returns what the plan a pending edit kept took (nothing for nil,
// or when it kept none).
func (b *planBudget) give(p *elfedit.Pending) {
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
// for the index. A root that is a symbolic link is followed when it leads
// into its own directory or below a directory root (followRoots); links
// met below a root are never followed: a link may point out of the tree
// being patched, and one that points into it reaches a file the walk lists
// anyway. It opens each root that is a directory (and
// the directory of each that is a file): what Run opens to decide and
// write below a root, it opens from that directory's descriptor without
// following a link (confine.Dir), so a directory swapped for a link out of
// the tree while the job runs is not followed. The caller closes them.
func collect(ctx context.Context, roots []string, recurse bool, jobs int, log *slog.Logger) ([]found, map[string][]string, []*confine.Dir, error) {
	var out []found
	var keys []string // out's paths with every link resolved, to find a file reached twice
	var opened []*confine.Dir
	below := map[string][]string{}
	targets, stats, err := followRoots(roots)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, given := range roots {
		r, st := targets[i], stats[i]
		if r != given {
			log.LogAttrs(ctx, slog.LevelDebug, "followed", slog.String("path", given), slog.String("target", r),
				slog.String("why", "a symbolic link named as a path to patch: its target is patched"))
		}
		if st.Mode().IsRegular() || special(st.Mode().Type()) {
			d, err := confine.Open(filepath.Dir(r))
			if err != nil {
				return nil, nil, opened, err
			}
			opened = append(opened, d)
			out = append(out, found{r, r})
			keys = append(keys, filepath.Join(resolved(filepath.Dir(r)), filepath.Base(r)))
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
		canon := resolved(r)
		for _, p := range files {
			out = append(out, found{p, r})
			keys = append(keys, canon+p[len(r):])
		}
		if recurse {
			below[given] = dirs
		}
	}
	// A file reached from two roots (a directory and a file below it, or
	// a link named as a root and its target) is decided once, under the
	// first: two decisions would claim it twice (the second finding it
	// locked) and write it twice.
	seen := make(map[string]bool, len(out))
	kept := out[:0]
	for i, f := range out {
		if !seen[keys[i]] {
			seen[keys[i]] = true
			kept = append(kept, f)
		}
	}
	return kept, below, opened, nil
}

// ErrLinkOut is what a root that is a symbolic link out of the paths to
// patch fails with (followRoots).
var ErrLinkOut = errors.New("not followed")

// followRoots returns each root, or, for a root that is a symbolic link,
// the path it leads to with every link resolved, and what each is (Lstat).
// A link is followed, as find -H and patchelf follow one named on the
// command line, when it leads to its own directory or below it
// (lib/libfoo.so -> libfoo.so.1), or below a root that is a directory:
// what it leads to is then part of the tree being patched. One that leads
// elsewhere (another package, the host's files) is an error naming both,
// wrapping ErrLinkOut, as is one that leads nowhere: the job does not
// write a file that is not part of what it was asked to patch.
func followRoots(roots []string) ([]string, []os.FileInfo, error) {
	targets := make([]string, len(roots))
	stats := make([]os.FileInfo, len(roots))
	var trees []string // the directory roots, links resolved
	for i, r := range roots {
		st, err := os.Lstat(r)
		if err != nil {
			return nil, nil, err
		}
		targets[i], stats[i] = r, st
		if st.IsDir() {
			trees = append(trees, resolved(r))
		}
	}
	for i, r := range roots {
		if stats[i].Mode().Type() != os.ModeSymlink {
			continue
		}
		t, err := filepath.EvalSymlinks(r)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: a symbolic link that leads nowhere: %w", r, unwrapPath(err))
		}
		inside := func(d string) bool { return within(t, d) }
		if !inside(resolved(filepath.Dir(r))) && !slices.ContainsFunc(trees, inside) {
			return nil, nil, fmt.Errorf("%s: a symbolic link to %s, outside its directory and the directories to patch: %w (name %s to patch it)", r, t, ErrLinkOut, t)
		}
		st, err := os.Lstat(t)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: a symbolic link to %s: %w", r, t, unwrapPath(err))
		}
		targets[i], stats[i] = t, st
	}
	return targets, stats, nil
}

// within says whether p is dir or lies below it (lexically).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// unwrapPath drops the operation of an *fs.PathError but keeps its path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// resolved is p with every symbolic link resolved, p itself when that
// fails (the file is then read by the path given, and fails there).
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// dirOf is the opened root (collect) path lies below, the deepest if
// several; nil if none.
func (c *job) dirOf(path string) *confine.Dir {
	var best *confine.Dir
	for _, d := range c.dirs {
		if _, err := d.Rel(path); err == nil && (best == nil || len(d.Path()) > len(best.Path())) {
			best = d
		}
	}
	return best
}

// claimBudget bounds the claims (elfedit.Pending.Claim) decide keeps open
// for the write phase: a descriptor each. Past it a claim is released
// after deciding, and taken again, checked, when its file is written.
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
func (c *job) interpreterTarget() *policy.Target {
	if c.Interpreter == "" {
		return nil
	}
	f, err := c.bufs.Open(c.Interpreter)
	if err != nil {
		return nil
	}
	defer f.Close()
	return &policy.Target{Class: f.Header.Class, Machine: f.Header.Machine, OSABI: f.Header.OSABI}
}

// decideSafe is decide, with a bug in the reader reported against the file
// instead of killing a whole build.
func (c *job) decideSafe(fd found, ix resolver, t *policy.Target, held bool, inherit []policy.Dep, prior *fileWork) (out *fileWork) {
	defer func() {
		if r := recover(); r != nil {
			out = &fileWork{File: &File{Path: fd.path, Root: fd.root}}
			out.addError(ErrorInternal, fmt.Errorf("internal error (please report): %v", r))
		}
	}()
	return c.decide(fd, ix, t, held, inherit, prior)
}

// decide reads one file and works out its new interpreter and RUNPATH.
// inherit are the dlopen-string names of other files this one may be the
// dlopen caller of (dlopenCallers), resolved there; prior is then the
// file's first decision, whose dlopen discovery is taken as it was
// instead of reading the file's read-only data again. A file with a big
// string table needs the gate (bigGate), which held says is taken for
// it: when it is not and the gate is taken, decide closes the file and
// returns nil, and is called again with the gate held.
func (c *job) decide(fd found, ix resolver, t *policy.Target, held bool, inherit []policy.Dep, prior *fileWork) *fileWork {
	path := fd.path
	out := &fileWork{File: &File{Path: path, Root: fd.root}}
	f := c.share.take(path) // read by a probe already, or nil
	var err error
	if f == nil {
		f, err = c.open(path, true)
	}
	if err != nil {
		switch {
		case errors.Is(err, elfedit.ErrNotELF):
			out.Skipped = policy.SkippedNotELF
			out.facts.skip = policy.SkipNotELF
		case errors.Is(err, elfedit.ErrNotRegular):
			// A FIFO, socket or device (refused before it is opened).
			out.Skipped = elfedit.ErrNotRegular.Error()
			out.facts.skip = policy.SkipNotRegular
		default:
			out.addError(ErrorRead, withoutPath(path, err))
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
	out.facts.machine, out.facts.osabi, out.facts.class = machine, osabi, info.ELFClass()
	if why, reason := policy.SkipOf(info, t); why != policy.SkipNone {
		out.Skipped, out.facts.skip = reason, why
		if t != nil {
			out.facts.target = *t
		}
		return out
	}
	out.loaded = c.loadedObject(f)
	if c.sym != nil && (out.Kind == elfedit.KindExecutable || out.Kind == elfedit.KindLibrary) {
		// The symbol check reads the file's tables in this open, before
		// any closure is bound (checkSymbols); an error is the check's
		// of each closure that holds the file.
		_ = c.sym.chk.ReadFile(path, f)
	}
	// FreeBSD and OpenBSD ship ld.so apart from libc in nixpkgs: libc must
	// get its RUNPATH entry there (auto-patchelf forces keep-libc too).
	keepLibc := c.keepLibc || osabi == elf.ELFOSABI_FREEBSD || osabi == elf.ELFOSABI_OPENBSD

	deps, err := c.resolveDeps(f, info, ix, keepLibc, out, prior)
	if err != nil {
		// Reported as far as they were resolved.
		out.Deps = policy.Classify(deps, c.Dlopen)
		out.addError(ErrorResolve, err)
		return out
	}
	facts := policy.Facts{Path: path, Root: fd.root, Machine: machine, Interpreter: info.Interpreter, OldPath: runpathDirs(info)}
	d := policy.Decide(facts, deps, inherit, &c.Config)
	out.Deps, out.RunPath, out.AsRPath, out.Interpreter = d.Deps, d.RunPath, d.AsRPath, d.Interpreter
	// A DT_NEEDED the edit adds gets its note entry, as any DT_NEEDED.
	for _, dep := range d.Deps {
		if dep.Source == policy.SourceAddNeeded {
			out.addNeeded = append(out.addNeeded, dep.Name)
			d.NoteNames = append(d.NoteNames, dep.Name)
		}
	}
	for _, p := range d.Problems {
		out.addError(ErrorAudit, p)
	}
	c.prepare(f, info, d.NoteNames, out)
	return out
}

// prepare makes out's decision an edit of f (the RUNPATH, or the kept one
// shrunk; the interpreter; the resolution note for noteNames), plans and
// verifies it, and checks before anything is written what would stop the
// write: the page size, hard links, the claim on the file.
func (c *job) prepare(f *elfedit.File, info elfedit.Info, noteNames []string, out *fileWork) {
	var e elfedit.Edit
	if out.RunPath != "" {
		rp := out.RunPath
		e.SetPath = &rp
		if out.AsRPath {
			e.Tag = elfedit.TagRPath
		}
	} else if c.shrinkKept {
		shrinkKept(info, &e)
		if e.SetPath != nil {
			out.RunPath = *e.SetPath
		}
	}
	if out.Interpreter != "" {
		ip := out.Interpreter
		e.Interpreter = &ip
	}
	e.AddNeeded = out.addNeeded
	var err error
	out.ResolutionCache, out.Note, err = c.resolutionNote(f, noteNames, finalPath(info, &e), &e)
	if err != nil {
		out.addError(ErrorNote, err)
		return
	}
	// Prepare verifies the planned result now wherever the read cache
	// held the file's tables, so a verifier failure stops the tree before
	// anything is written. The write phase reuses the plans the budget
	// keeps; it plans and verifies the others again.
	pending, err := c.batch.Prepare(f, e, c.kept.take)
	if err != nil {
		out.addError(ErrorPlan, err)
		return
	}
	out.Changed = pending.Changed()
	out.Strategy = pending.Strategy()
	if msg := c.pageSizeProblem(info.ELFMachine()); out.Changed && msg != "" {
		out.addError(ErrorPageSize, errors.New(msg))
		pending.Close()
		return
	}
	out.edit = e
	out.pending = pending
	// A file with other hard links is written once for all its names
	// when every one is in the outputs and gets this edit, and refused
	// otherwise (writing it would change the others too): hardLinks
	// settles which, once every file is decided, before anything is
	// written. It is claimed once, by the first of its names here.
	if id, ok := f.Identity(); ok && id.Links > 1 {
		out.ident = id
		if out.Changed && c.links.first(id) {
			c.claim(f, out)
		}
		return
	}
	if n := linkCount(out.Path); out.Changed && n > 1 {
		out.addError(ErrorHardLinks, &elfedit.HardLinkError{Links: n})
		return
	}
	// So does opening it for writing now, and locking it until it is
	// written (claim).
	if out.Changed {
		c.claim(f, out)
	}
}

// resolveDeps resolves what f needs: DT_NEEDED in order, then
// .note.dlopen entries, then (with --dlopen) the names its read-only data
// spells, each with its Source. The error says a name could not be
// resolved at all; the deps are then those resolved before it.
func (c *job) resolveDeps(f *elfedit.File, info elfedit.Info, ix resolver, keepLibc bool, out, prior *fileWork) ([]policy.Dep, error) {
	class, machine, osabi := info.ELFClass(), info.ELFMachine(), info.ELFOSABI()
	type want struct {
		alts   []string
		source string
	}
	var wants []want
	for _, n := range info.Needed {
		wants = append(wants, want{[]string{n}, policy.SourceNeeded})
	}
	for _, d := range info.Dlopen {
		if len(d.Soname) > 0 {
			wants = append(wants, want{d.Soname, policy.SourceDlopen})
		}
	}
	var deps []policy.Dep
	for _, w := range wants {
		dep, err := c.resolve(w.alts, ix, class, machine, osabi, keepLibc, true)
		if err != nil {
			return deps, err
		}
		dep.Source = w.source
		if w.source == policy.SourceDlopen {
			dep.Evidence = policy.Evidence{File: out.Path, String: strings.Join(w.alts, ", "), Kind: policy.EvidenceNote}
		}
		deps = append(deps, dep)
	}
	// Then the names a dlopen caller's read-only data spells (none when
	// a .note.dlopen says what it dlopens: the note is authoritative).
	if c.Dlopen == policy.DlopenOff {
		return deps, nil
	}
	// The names are a hint: a file whose read-only data cannot be read
	// (a section header past its end) is patched without them, and says
	// why.
	d, derr := policy.Discovered{}, error(nil)
	if prior != nil {
		d, out.DlopenError = prior.dlopen, prior.DlopenError
	} else {
		if c.discovering != nil {
			c.discovering(out.Path)
		}
		if d, derr = policy.Discover(f, false); derr != nil {
			out.DlopenError = derr.Error()
		}
	}
	out.dlopen = d
	return c.discovered(out.Path, d, ix, class, machine, osabi, keepLibc, deps)
}

// discovered appends to deps what dlopen discovery found in the file at
// path: each name resolved as a DT_NEEDED is (SourceStrings, with
// resolveVersioned), then for each soname prefix the libraries of the
// index it matches (SourcePrefix, at most one a directory), but for the
// file itself, the driver's libraries (found through the driver link,
// never the store) and directories deps reach already. Each carries its
// evidence.
func (c *job) discovered(path string, d policy.Discovered, ix resolver, class elf.Class, machine elf.Machine, osabi elf.OSABI, keepLibc bool, deps []policy.Dep) ([]policy.Dep, error) {
	for _, n := range d.Names {
		dep, err := c.resolve([]string{n}, ix, class, machine, osabi, keepLibc, false)
		if err != nil {
			return deps, err
		}
		dep.Source = policy.SourceStrings
		if dep, err = c.resolveVersioned(dep, ix, class, machine, osabi); err != nil {
			return deps, err
		}
		dep.Evidence = policy.Evidence{File: path, String: n, Kind: policy.EvidenceWhole}
		deps = append(deps, dep)
	}
	for _, pre := range d.Prefixes {
		cands, err := ix.lookupPrefix(pre, class, machine, osabi)
		if err != nil {
			return deps, fmt.Errorf("resolving %s: %w", pre, err)
		}
		for _, cand := range cands {
			name := filepath.Base(cand.path)
			reached := func(o policy.Dep) bool {
				return o.Dir == cand.dir && (o.How == policy.HowStore || o.How == policy.HowVersioned)
			}
			if c.driverLibs.Match(name) || slices.ContainsFunc(deps, reached) || sameFile(cand.path, path) {
				continue
			}
			deps = append(deps, policy.Dep{Name: name, Source: policy.SourcePrefix, How: policy.HowStore, Path: cand.path, Dir: cand.dir,
				Evidence: policy.Evidence{File: path, String: pre, Kind: policy.EvidencePrefix}})
		}
	}
	return deps, nil
}

// sameFile says whether a and b are the same existing file.
func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// claim opens f for writing and locks it until it is written: a file this
// user may not write, or that another run (or any writer that locks)
// holds, fails before anything is written. A dry run only asks, and lets
// go.
func (c *job) claim(f *elfedit.File, out *fileWork) {
	err := out.pending.Claim(f)
	switch {
	case err != nil:
		out.addError(ErrorClaim, err)
	case c.dryRun:
		out.pending.Close()
	case !c.claims.take():
		out.pending.Release()
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
func (c *job) resolve(alts []string, ix resolver, class elf.Class, machine elf.Machine, osabi elf.OSABI, keepLibc, hint bool) (policy.Dep, error) {
	for _, name := range alts {
		switch {
		case c.driverLibs.Match(name):
			return policy.Dep{Name: name, How: policy.HowDriver, Pattern: c.ignorePattern(name, nil)}, nil
		case filepath.IsAbs(name):
			if _, err := os.Stat(name); err == nil {
				return policy.Dep{Name: name, How: policy.HowAbsolute, Path: name}, nil
			}
		case !keepLibc && c.libcDir != "" && c.inLibc(name):
			return policy.Dep{Name: name, How: policy.HowLibc, Path: filepath.Join(c.libcDir, name)}, nil
		}
		cand, ok, err := ix.lookup(name, class, machine, osabi)
		if err != nil {
			return policy.Dep{}, fmt.Errorf("resolving %s: %w", name, err)
		}
		if ok {
			return policy.Dep{Name: name, How: policy.HowStore, Path: cand.path, Dir: cand.dir}, nil
		}
		// With keep-libc, a libc name no search directory has is still
		// found by the interpreter (auto-patchelf.py's "step 4").
		if keepLibc && c.libcDir != "" && !filepath.IsAbs(name) && c.inLibc(name) {
			return policy.Dep{Name: name, How: policy.HowLibc, Path: filepath.Join(c.libcDir, name)}, nil
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
		return policy.Dep{Name: name, How: policy.HowIgnored, Pattern: p}, nil
	}
	if !hint {
		return policy.Dep{Name: name, How: policy.HowMissing}, nil
	}
	return policy.Dep{Name: name, How: policy.HowMissing, Hint: ix.sonameHint(alts[0], class, machine, osabi)}, nil
}

// resolveVersioned resolves a dlopen-string name found nowhere (or
// ignored as such) that has
// no version ("libX.so") to the first file of the index, in its
// precedence, that has a version ("libX.so.9"): policy.HowVersioned under
// policy.DlopenResolve, policy.HowFound under policy.DlopenReport. Any other dep is returned as
// it is.
func (c *job) resolveVersioned(dep policy.Dep, ix resolver, class elf.Class, machine elf.Machine, osabi elf.OSABI) (policy.Dep, error) {
	prefix := policy.Unversioned(dep.Name)
	// An ignore pattern is for what is found nowhere: a versioned file
	// found wins over it.
	if dep.How != policy.HowMissing && dep.How != policy.HowIgnored || prefix == "" {
		return dep, nil
	}
	cand, ok, err := ix.lookupVersioned(prefix, class, machine, osabi)
	if err != nil {
		return dep, fmt.Errorf("resolving %s: %w", dep.Name, err)
	}
	if !ok {
		return dep, nil
	}
	how := policy.HowVersioned
	if c.Dlopen == policy.DlopenReport {
		how = policy.HowFound
	}
	return policy.Dep{Name: dep.Name, Source: dep.Source, How: how, Path: cand.path, Dir: cand.dir}, nil
}

// ignorePattern returns the first ignore-missing pattern that matches the
// basename of name or of one of alts, or "".
func (c *job) ignorePattern(name string, alts []string) string {
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

// inLibc says whether the libc directory has name. Every file asks for
// the same few names (libc.so.6, libm.so.6...): each is looked up once.
func (c *job) inLibc(name string) bool {
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

// SkippedForTarget says the file was skipped for its architecture or OS
// ABI, not for its kind.
func (f *File) SkippedForTarget() bool {
	return f.facts.skip == policy.SkipArch || f.facts.skip == policy.SkipOSABI
}
