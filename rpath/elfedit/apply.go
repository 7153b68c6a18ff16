package elfedit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/cudapatch/cudapatch/internal/confine"
)

// Target is what a plan is written to: the file it was made from.
type Target interface {
	io.WriterAt
	io.ReaderAt
	Truncate(size int64) error
}

type syncer interface{ Sync() error }

// commitChecker is a Target that checks, just before the commit, that
// the file is still the one the plan was made for, as the steps before
// left it, and just after it, that it still was: else the commit is
// undone (guarded). Other steps write bytes nothing reads yet, or, past
// the end, check for themselves.
type commitChecker interface {
	beforeCommit() error
	afterCommit() error
}

// oldViewer is a Target that holds what the file held before the plan
// ran, and lends it for the undo copies instead of a copy of its own
// (cachedTarget).
type oldViewer interface {
	oldBytes(off, n int64) ([]byte, bool)
}

// Apply writes the plan to t, which must hold the bytes the plan was made
// from. Steps run in order; if one fails, the steps before it are undone
// (their old bytes written back, the file cut to its old size) and the
// error says so. A plan of more than one write first appends a journal
// (journal.go), which its last step cuts away, so that an edit run again
// after a process killed between two writes finishes or undoes this one.
// With sync, the data is flushed after the journal, before the commit
// step, after it when anything follows (clearing the old bytes must not
// reach the disk before the switch away from them: a power loss may
// write pages back in any order), before the cut that drops the journal,
// and after the last step, so that a power loss, too, finds the original
// or the result, and a next run the journal as long as it is needed.
func (p *Plan) Apply(t Target, sync bool) error {
	return p.apply(t, sync, len(p.Steps))
}

// apply runs the first n steps (all of them in normal use; fewer in tests
// that simulate a crash, which is why nothing is undone in that case).
func (p *Plan) apply(t Target, sync bool, n int) error {
	if p.spent() {
		return errSpent
	}
	flush := func() error {
		if s, ok := t.(syncer); ok && sync {
			return s.Sync()
		}
		return nil
	}
	if p.recover != nil {
		if err := p.recover.apply(t, flush); err != nil {
			return fmt.Errorf("finishing the interrupted edit the file's journal records: %w", err)
		}
	}
	undos, err := p.undoRecords(t)
	if err != nil {
		return err
	}
	rollback := func(cause error) error { return rollback(t, undos, p.OldSize, cause) }
	journaled := n > 0 && p.needsJournal(sync)
	if journaled {
		body, tail, err := p.encodeJournal(undos)
		if err != nil {
			return err
		}
		// The reservation first, appended: the pattern up to the trailer,
		// then the trailer (journal.go); then the body it vouches for,
		// into the reservation.
		at := p.journalAt()
		tailAt := trailerAt(at + int64(len(body)))
		if err := reserve(t, p.OldSize, tailAt, tail); err != nil {
			return rollback(fmt.Errorf("writing the journal's reservation (0x%x bytes at 0x%x): %w", tailAt+int64(len(tail))-p.OldSize, p.OldSize, err))
		}
		if _, err := t.WriteAt(body, at); err != nil {
			return rollback(fmt.Errorf("writing the journal (0x%x bytes at 0x%x): %w", len(body), at, err))
		}
		// Where the new file grows, the plan writes into what was a hole
		// before there was a reservation: zeros again, once the journal
		// vouches for the state.
		if grow := min(p.NewSize, at) - p.OldSize; grow > 0 {
			if err := writeZeros(t, p.OldSize, grow); err != nil {
				return rollback(fmt.Errorf("clearing 0x%x bytes at 0x%x: %w", grow, p.OldSize, err))
			}
		}
		if err := flush(); err != nil {
			return rollback(fmt.Errorf("sync after the journal: %w", err))
		}
	}
	check, _ := t.(commitChecker)
	for i, st := range p.Steps[:n] {
		if st.Kind == StepCommit {
			if err := flush(); err != nil {
				return rollback(fmt.Errorf("sync before commit: %w", err))
			}
			// The last thing before the commit: a sync may take long.
			if check != nil {
				if err := check.beforeCommit(); err != nil {
					return rollback(fmt.Errorf("step %d (%s): %w", i, st.What, err))
				}
			}
		}
		if st.Kind == StepTruncate {
			// The cut takes the journal: what the steps before it wrote
			// reaches the disk first.
			if err := flush(); err != nil {
				return fmt.Errorf("step %d (%s): sync: %w", i, st.What, err)
			}
			if err := t.Truncate(st.Len); err != nil {
				return fmt.Errorf("step %d (%s): %w", i, st.What, err)
			}
			continue
		}
		data, off := st.data, st.Off
		if st.Kind == StepCommit && sync && st.head > 0 {
			// The commit's own bytes, flushed (below) before the
			// clearing it took in.
			data = st.data[:st.head]
		}
		if _, err := t.WriteAt(data, off); err != nil {
			err = fmt.Errorf("step %d (%s): writing 0x%x bytes at 0x%x: %w", i, st.What, len(data), off, err)
			if st.Kind == StepHygiene || st.Kind == StepTruncate {
				return err // the result is in place; only its tidying failed
			}
			return rollback(err)
		}
		if check != nil && st.Kind == StepCommit {
			// A link made, or the path renamed, between the check and
			// the write: the commit is undone.
			if err := check.afterCommit(); err != nil {
				return rollback(fmt.Errorf("step %d (%s): %w", i, st.What, err))
			}
		}
		if st.Kind != StepCommit || i == n-1 && len(data) == len(st.data) {
			continue
		}
		if err := flush(); err != nil {
			return rollback(fmt.Errorf("sync after commit: %w", err))
		}
		if rest := st.data[len(data):]; len(rest) > 0 {
			off += int64(len(data))
			if _, err := t.WriteAt(rest, off); err != nil {
				return rollback(fmt.Errorf("step %d (%s): writing 0x%x bytes at 0x%x: %w", i, st.What, len(rest), off, err))
			}
		}
	}
	if journaled && n == len(p.Steps) && p.Steps[n-1].Kind != StepTruncate {
		// The result is in place; the journal goes, after what it would
		// have finished reached the disk.
		if err := flush(); err != nil {
			return fmt.Errorf("sync before dropping the journal: %w", err)
		}
		if err := t.Truncate(p.NewSize); err != nil {
			return fmt.Errorf("dropping the journal: %w", err)
		}
	}
	return flush()
}

// reserver is a Target that appends a journal's reservation itself,
// through O_APPEND, checking that no other process appended meanwhile
// (guarded).
type reserver interface {
	reserve(s, tailAt int64, tail []byte) error
}

// reserve writes a journal's reservation past the old end s of the file t
// holds: the fill pattern from s to tailAt, then the trailer.
func reserve(t Target, s, tailAt int64, tail []byte) error {
	if w, ok := t.(reserver); ok {
		return w.reserve(s, tailAt, tail)
	}
	b := make([]byte, tailAt-s+int64(len(tail)))
	fill(b[:tailAt-s], s, s)
	copy(b[tailAt-s:], tail)
	_, err := t.WriteAt(b, s)
	return err
}

// writeZeros writes n zero bytes at off, at most oneWrite at a time: a
// file may grow by far more than it holds (a new segment aligned past a
// hostile file's highest address), and the zeros are not to be held in
// memory at once.
func writeZeros(t Target, off, n int64) error {
	zeros := make([]byte, min(n, oneWrite))
	for n > 0 {
		m := min(n, int64(len(zeros)))
		if _, err := t.WriteAt(zeros[:m], off); err != nil {
			return err
		}
		off, n = off+m, n-m
	}
	return nil
}

// undoRecords reads the old bytes of every step up to the commit, to
// undo them if a later step fails, and for the journal a run after a
// crash reads.
func (p *Plan) undoRecords(t Target) ([]undoRec, error) {
	var undos []undoRec
	for i, st := range p.Steps[:p.undoTo(len(p.Steps))+1] {
		if st.Kind == StepTruncate || st.Off >= p.OldSize {
			continue
		}
		end := min(st.Off+st.Len, p.OldSize)
		old, ok := []byte(nil), false
		if v, isViewer := t.(oldViewer); isViewer && p.recover == nil {
			old, ok = v.oldBytes(st.Off, end-st.Off)
		}
		if !ok {
			old = make([]byte, end-st.Off)
			if _, err := t.ReadAt(old, st.Off); err != nil {
				return nil, fmt.Errorf("step %d (%s): reading old bytes: %w", i, st.What, err)
			}
		}
		undos = append(undos, undoRec{st.Off, old})
	}
	return undos, nil
}

// rollback writes the old bytes back and cuts the file to its old size
// after cause stopped an edit, and returns cause saying whether that worked.
func rollback(t Target, undos []undoRec, oldSize int64, cause error) error {
	var errs []error
	for i := len(undos) - 1; i >= 0; i-- {
		if _, err := t.WriteAt(undos[i].old, undos[i].off); err != nil {
			errs = append(errs, err)
		}
	}
	if err := t.Truncate(oldSize); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; restoring the original also failed: %w", cause, errors.Join(errs...))
	}
	return fmt.Errorf("%w (file restored)", cause)
}

// Result reads the file as it will be after the plan, without writing
// anything: the verifier runs on it before the plan is committed.
func (p *Plan) Result() (*File, error) {
	if p.f == nil {
		return nil, fmt.Errorf("a prepared plan does not read its file")
	}
	if p.spent() {
		return nil, errSpent
	}
	return NewFile(&overlay{base: p.f.r, baseSize: p.f.size, steps: p.Steps, size: p.NewSize}, p.NewSize)
}

// errSpent refuses a plan whose file was closed and gave its buffers back.
var errSpent = errors.New("the plan's file was closed, and with it the buffers the plan writes from: plan again")

// spent reports whether the plan's data may have been given back: it is
// tied to a file read through a cache with Buffers that has been closed
// (readCache.spent). A prepared plan holds its own data.
func (p *Plan) spent() bool {
	if p.f == nil {
		return false
	}
	r := p.f.r
	if v, ok := r.(*recoveryView); ok {
		r = v.base // the file as its journal leaves it
	}
	c, ok := r.(*readCache)
	return ok && c.spent()
}

// overlay reads a file through the writes of a plan.
type overlay struct {
	base     io.ReaderAt
	baseSize int64
	steps    []Step
	size     int64
}

// view returns the bytes at [off, off+n) of the planned file without a
// copy when one step writes them all and no later step overlaps them: a
// slice of that step's data, which nothing writes to once planned. The
// verifier reads the moved string table this way instead of copying it
// once more for every plan.
func (o *overlay) view(off, n int64) ([]byte, bool) {
	if off < 0 || n <= 0 || off+n > o.size {
		return nil, false
	}
	for i := len(o.steps) - 1; i >= 0; i-- {
		st := &o.steps[i]
		if st.Kind == StepTruncate || off+n <= st.Off || off >= st.Off+st.Len {
			continue
		}
		if off >= st.Off && off+n <= st.Off+st.Len {
			return st.data[off-st.Off : off-st.Off+n : off-st.Off+n], true
		}
		return nil, false // a later step covers part of it
	}
	return nil, false
}

func (o *overlay) ReadAt(b []byte, off int64) (int, error) {
	b, err := readBase(o.base, o.baseSize, o.size, b, off)
	if err != nil {
		return 0, err
	}
	n := len(b)
	for _, st := range o.steps {
		if st.Kind == StepTruncate {
			continue
		}
		lo, hi := max(off, st.Off), min(off+int64(n), st.Off+st.Len)
		if lo < hi {
			copy(b[lo-off:hi-off], st.data[lo-st.Off:hi-st.Off])
		}
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// readBase reads, for a view of size bytes whose first baseSize bytes base
// holds and whose others are zeros until written, the bytes at off into b:
// b cut to what lies before size, io.EOF when off is past it. The view
// then copies its own writes over them.
func readBase(base io.ReaderAt, baseSize, size int64, b []byte, off int64) ([]byte, error) {
	if off >= size {
		return nil, io.EOF
	}
	b = b[:min(int64(len(b)), size-off)]
	clear(b)
	if off < baseSize {
		m := min(int64(len(b)), baseSize-off)
		if _, err := base.ReadAt(b[:m], off); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	return b, nil
}

// Options control EditFile and Pending.Commit: how one edit of a path is
// written.
type Options struct {
	// Sync flushes data to disk before the commit step and at the end, so
	// that a power loss (not only a crash of this process) leaves the
	// original or the result.
	Sync bool
	// BreakHardLinks edits a file with several hard links by writing a
	// copy next to it and renaming the copy over the path, leaving the
	// other links with the old content. Without it such files are refused
	// with ErrHardLinks (unless Links names every other link): editing in
	// place would change every link.
	BreakHardLinks bool
	// Links are the file's other names, which the caller means to edit
	// with it (every one gets this edit). A file whose link count is one
	// more than len(Links) is edited in place, once, for all its names;
	// each must name the file before anything is written and just before
	// and after the commit, and the count must stay, or the write fails
	// (ErrChanged) and the file is restored. With any other count the
	// file is refused (or, with BreakHardLinks, copied) as without them.
	Links []Link
	// DryRun plans and verifies but writes nothing.
	DryRun bool
	// NoFollow refuses a path that is a symbolic link instead of editing
	// what it points to: a tree walker that saw a regular file must not
	// write through a link that replaced it since (it may point out of the
	// tree).
	NoFollow bool
	// KeepOldSections leaves the bytes that moved data used to occupy as
	// they were (no hygiene steps): for programs that read their own
	// headers at the old offsets (patchelf --no-clobber-old-sections).
	KeepOldSections bool
	// hook, set by tests (WithHook), runs in the write at the moments
	// another process's change matters: "append" before bytes are
	// appended (the size checked), "commit" before the check just before
	// the commit, "committed" before the check just after it, "end"
	// before the last check of the size.
	hook func(at string)
}

// WithHook returns o with fn run at the moments of the write another
// process's change matters (see Options.hook): for tests, here and in
// the packages that write through EditFile or Pending.Commit, that
// change the file at those moments.
func WithHook(o Options, fn func(at string)) Options {
	o.hook = fn
	return o
}

// Link is a name of a file: Path, opened below Dir without following
// a symbolic link (confine.Dir), or with Dir nil by path, not following
// a final link.
type Link struct {
	Dir  *confine.Dir
	Path string
}

// stat is what the link names now.
func (l Link) stat() (*syscall.Stat_t, error) {
	if l.Dir != nil {
		return l.Dir.Stat(l.Path)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(l.Path, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: l.Path, Err: err}
	}
	return &st, nil
}

// Result of EditFile and Pending.Commit.
type Result struct {
	Plan    *Plan
	Before  Info
	After   Info
	Changed bool
	// Reused says the commit wrote the plan Batch.Prepare kept, without
	// planning again (the file still read the same).
	Reused bool
}

// EditFile edits the file at path in place: it reads the headers, plans the
// edit, verifies the planned result (every invariant the original met must
// still hold, and the result must carry the requested values), and applies
// the plan. A no-op edit does not open the file for writing, so its bytes
// and its modification time stay as they are. Errors name the path.
//
// A symbolic link is followed (unless Options.NoFollow): the file it names
// is edited, or with BreakHardLinks replaced by the edited copy, and the
// link itself stays as it is.
func EditFile(path string, e Edit, opt Options) (*Result, error) {
	res, err := editFile(path, e, opt, batched{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

// editFile is EditFile, with what a Pending holds for its commit (in):
// the file read through in.bufs; with in.claim, read and written through
// the claim's descriptor, locked since the file was planned, and not the
// path (the claim is taken over, and the file must still be the one
// claimed, as it was read); with in.plan, that plan written without
// planning and verifying again when the file still holds every byte it
// was made from, else the file planned afresh (in.plan is not used with
// KeepOldSections).
func editFile(path string, e Edit, opt Options, in batched) (*Result, error) {
	nofollow := 0
	if opt.NoFollow {
		nofollow = syscall.O_NOFOLLOW
	}
	var rf *fdFile
	var st *syscall.Stat_t
	var err error
	var where func() (*syscall.Stat_t, error) // what path names now
	if in.claim != nil {
		// Read and written through the claim's descriptor: the file
		// found and locked while it was planned, whatever its path
		// names now.
		if rf, st, err = in.claim.take(); err != nil {
			return nil, err
		}
		where = in.claim.where
	} else {
		where = func() (*syscall.Stat_t, error) {
			var st syscall.Stat_t
			stat := syscall.Stat
			if opt.NoFollow {
				stat = syscall.Lstat
			}
			if err := stat(path, &st); err != nil {
				return nil, &os.PathError{Op: "stat", Path: path, Err: err}
			}
			return &st, nil
		}
		// O_NONBLOCK: opening a FIFO for reading would otherwise wait
		// for a writer forever; for a regular file it changes nothing.
		if rf, err = openFD(path, syscall.O_RDONLY|syscall.O_NONBLOCK|nofollow); err != nil {
			return nil, openErr(err, opt.NoFollow)
		}
		if st, err = rf.stat(); err != nil {
			rf.Close()
			return nil, unwrapPath(err)
		}
	}
	rc := newReadCache(rf, st.Size, in.bufs)
	rc.editing = true
	defer rc.Close()
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("not a regular file")
	}
	var res *Result
	var plan *Plan
	if p := in.plan; p != nil && p.fp != nil && !opt.KeepOldSections && rc.holdsAgain(p.fp, st, &e) {
		// The plan prepare made and verified from these very bytes,
		// its steps rebuilt from them.
		if steps, ok := rc.materialize(p, p.det); ok {
			res = &Result{Plan: p, Before: p.fp.before, After: p.fp.after, Changed: !p.IsNoOp(), Reused: true}
			plan = &Plan{Strategy: p.Strategy, Steps: steps, OldSize: p.OldSize, NewSize: p.NewSize, Written: p.Written}
		}
	}
	if res == nil {
		if res, err = planFile(rc, st.Size, &e, opt.KeepOldSections); err != nil {
			return nil, err
		}
		plan = res.Plan
	}
	if !res.Changed {
		return res, nil
	}
	if opt.DryRun {
		return res, nil
	}
	linked := len(opt.Links) > 0 && uint64(st.Nlink) == uint64(len(opt.Links))+1
	if st.Nlink > 1 && !linked {
		if !opt.BreakHardLinks {
			return nil, &HardLinkError{Links: uint64(st.Nlink)}
		}
		return res, applyCopy(path, rc, st, plan, opt.Sync)
	}
	wf := rf
	if in.claim == nil {
		if wf, err = reopenForWriting(rf, path, nofollow); err != nil {
			if opt.NoFollow && errors.Is(err, syscall.ELOOP) {
				return nil, openErr(err, true)
			}
			return nil, forWriting(err)
		}
		// Locked as a claim locks it, so this write and a batch's (or
		// another tool's that locks) do not interleave.
		if err := (&fileClaim{id: identOf(st)}).lock(wf); err != nil {
			wf.Close()
			return nil, err
		}
	}
	closeWF := func() error {
		if wf == rf {
			// The claim's descriptor is the cache's: closed with it
			// (and again, harmlessly, by the deferred Close), so that
			// its error is reported.
			return rc.Close()
		}
		return wf.Close()
	}
	// The undo copies of the bytes each step overwrites come from what
	// the plan was made from, read already, when the cache still holds
	// them; a recovery plan's writes change bytes the cache holds, so it
	// reads the file itself. The commit is checked to find the file as
	// the steps before it left it, and what the file grows by is appended
	// (guarded).
	g := &guarded{cachedTarget: cachedTarget{wf, rc}, size: st.Size, hook: opt.hook, direct: plan.recover != nil, want: identOf(st)}
	if where != nil {
		g.names = append(g.names, where)
	}
	if linked {
		for _, l := range opt.Links {
			g.names = append(g.names, l.stat)
		}
		// Every name of it is one the caller edits, before a byte is.
		if err := g.sameFile(st); err != nil {
			closeWF()
			return nil, fmt.Errorf("%w; left as it is", err)
		}
	}
	if err := plan.Apply(g, opt.Sync); err != nil {
		closeWF()
		return nil, err
	}
	if g.hook != nil {
		g.hook("end")
	}
	if err := g.beforeStep(); err != nil {
		closeWF()
		return nil, fmt.Errorf("written, but %w", err)
	}
	if err := keepMode(wf, st.Mode); err != nil {
		closeWF()
		return nil, err
	}
	if err := closeWF(); err != nil {
		return nil, unwrapPath(err)
	}
	return res, nil
}

// guarded is the Target of EditFile: before the commit (and after the
// last step), the file must have the size the steps before left it with,
// or another process changed it; a write past the end appends with
// O_APPEND, so the kernel places it at the end the file has then, and it
// overwrites nothing another process appended; the size after it says
// whether it landed where the plan put it. A truncation is refused when
// the file is not the size expected: it would cut another's bytes.
type guarded struct {
	cachedTarget
	size   int64
	hook   func(at string) // Options.hook
	direct bool            // read the file, not the cache (a recovery plan)
	// want is what the file must still be at the commit: its device,
	// inode and link count as when it was taken, its mtime and ctime as
	// this edit's own last write left them (each write before the commit
	// stats the file after it, which is all that tells this process's
	// stamps from another's).
	want fileIdent
	// names stat what each name of the file names now: every one must
	// still name it at the commit.
	names     []func() (*syscall.Stat_t, error)
	committed bool
}

func (g *guarded) ReadAt(b []byte, off int64) (int, error) {
	if g.direct {
		return g.fdFile.ReadAt(b, off)
	}
	return g.cachedTarget.ReadAt(b, off)
}

func (g *guarded) oldBytes(off, n int64) ([]byte, bool) {
	if g.direct {
		return nil, false
	}
	return g.cachedTarget.oldBytes(off, n)
}

// beforeCommit checks, just before the commit, that the file is the one
// decided on (its link count as it was, every name still naming it) and
// as this edit's steps left it (its size, mtime and ctime).
func (g *guarded) beforeCommit() error {
	if g.hook != nil {
		g.hook("commit")
	}
	st, err := g.fdFile.stat()
	if err != nil {
		return unwrapPath(err)
	}
	if err := g.sameFile(st); err != nil {
		return err
	}
	if st.Size != g.size {
		return fmt.Errorf("%w: %d bytes, now %d", ErrChanged, g.size, st.Size)
	}
	if st.Mtim != g.want.mtime || st.Ctim != g.want.ctime {
		return fmt.Errorf("%w: modified while it was being written", ErrChanged)
	}
	return nil
}

// afterCommit checks, just after the commit, that the file was still the
// one decided on when it landed (a link made, or the path renamed,
// between beforeCommit and the write); the caller undoes it if not.
func (g *guarded) afterCommit() error {
	if g.hook != nil {
		g.hook("committed")
	}
	g.committed = true
	st, err := g.fdFile.stat()
	if err != nil {
		return unwrapPath(err)
	}
	return g.sameFile(st)
}

// sameFile checks that every name of the file still names the file st
// describes, and that it has the links it had when taken.
func (g *guarded) sameFile(st *syscall.Stat_t) error {
	for _, where := range g.names {
		now, err := where()
		if err != nil {
			return fmt.Errorf("%w: no longer found where it was: %w", ErrChanged, unwrapPath(err))
		}
		if now.Dev != st.Dev || now.Ino != st.Ino {
			what := "another file"
			if now.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				what = "a directory"
			}
			return fmt.Errorf("%w: its path names %s now", ErrChanged, what)
		}
	}
	if n := uint64(st.Nlink); n != g.want.nlink {
		return fmt.Errorf("%w: %s", ErrChanged, linksChanged(g.want.nlink, n))
	}
	return nil
}

// linksChanged says a file's link count went from was to now.
func linksChanged(was, now uint64) string {
	return fmt.Sprintf("its link count went from %d to %d (a hard link made or removed)", was, now)
}

// seen records the mtime and ctime this edit's own write left, before
// the commit (see want).
func (g *guarded) seen(st *syscall.Stat_t) {
	if !g.committed {
		g.want.mtime, g.want.ctime = st.Mtim, st.Ctim
	}
}

// seenNow is seen of a fresh stat.
func (g *guarded) seenNow() error {
	if g.committed {
		return nil
	}
	st, err := g.fdFile.stat()
	if err != nil {
		return unwrapPath(err)
	}
	g.seen(st)
	return nil
}

func (g *guarded) beforeStep() error {
	st, err := g.fdFile.stat()
	if err != nil {
		return unwrapPath(err)
	}
	if st.Size != g.size {
		return fmt.Errorf("%w: %d bytes, now %d", ErrChanged, g.size, st.Size)
	}
	return nil
}

func (g *guarded) WriteAt(b []byte, off int64) (int, error) {
	end := off + int64(len(b))
	if end <= g.size {
		n, err := g.fdFile.WriteAt(b, off)
		if err == nil {
			err = g.seenNow()
		}
		return n, err
	}
	n := 0
	if off < g.size {
		m, err := g.fdFile.WriteAt(b[:g.size-off], off)
		if err != nil {
			return m, err
		}
		n, b, off = m, b[m:], g.size
	}
	if err := g.beforeStep(); err != nil {
		return n, err
	}
	if g.hook != nil {
		g.hook("append")
	}
	m, err := g.fdFile.appendAll(off-g.size, b)
	want := g.size + int64(m)
	g.size = want // a partial write's bytes are ours: the rollback cuts them
	if err != nil {
		return n, err
	}
	st, err := g.fdFile.stat()
	if err != nil {
		return n, unwrapPath(err)
	}
	g.seen(st)
	if st.Size != want {
		// Another process appended between the check and this write, or
		// since: its bytes are kept, nothing will point at these, and the
		// size left expected makes the rollback's truncation refuse.
		return n, fmt.Errorf("%w: another process appended to it while it was written (%d bytes, expected %d); its bytes are kept", ErrChanged, st.Size, want)
	}
	return n + len(b), nil
}

// reserve appends the reservation with O_APPEND, never pwrite past the
// end: another process appending meanwhile keeps its bytes, before or
// after these, and the size read after says so. A trailer of ours left as
// the file's last bytes then is cleared, so that no later edit takes
// their bytes for a journal's.
func (g *guarded) reserve(s, tailAt int64, tail []byte) error {
	if s != g.size {
		return fmt.Errorf("the reservation starts at 0x%x, the file ends at 0x%x", s, g.size)
	}
	if err := g.beforeStep(); err != nil {
		return err
	}
	if g.hook != nil {
		g.hook("append")
	}
	m, err := g.fdFile.appendFill(s, tailAt-s, tail)
	want := s + int64(m)
	g.size = want // a partial write's bytes are ours: the rollback cuts them
	if err != nil {
		return err
	}
	st, err := g.fdFile.stat()
	if err != nil {
		return unwrapPath(err)
	}
	g.seen(st)
	if st.Size != want {
		if last := make([]byte, len(tail)); st.Size >= int64(len(tail)) {
			if _, rerr := g.fdFile.ReadAt(last, st.Size-int64(len(tail))); rerr == nil && bytes.Equal(last, tail) {
				_, _ = g.fdFile.WriteAt(make([]byte, len(tail)), st.Size-int64(len(tail)))
			}
		}
		return fmt.Errorf("%w: another process appended to it while it was written (%d bytes, expected %d); its bytes are kept", ErrChanged, st.Size, want)
	}
	return nil
}

func (g *guarded) Truncate(size int64) error {
	if err := g.beforeStep(); err != nil {
		return fmt.Errorf("not cut to %d bytes: %w", size, err)
	}
	if err := g.fdFile.Truncate(size); err != nil {
		return err
	}
	g.size = size
	return g.seenNow()
}

// undoTo is the last of the first n steps whose old bytes apply keeps
// to undo it: only the steps up to the last one whose failure rolls back
// need them (a failed hygiene step or truncation leaves the result,
// tidied less). -1 if none.
func (p *Plan) undoTo(n int) int {
	last := -1
	for i, st := range p.Steps[:n] {
		if st.Kind != StepHygiene && st.Kind != StepTruncate {
			last = i
		}
	}
	return last
}

// undoSpans lists the ranges of the file that Apply keeps the old bytes
// of, to undo the steps that overwrite them.
func (p *Plan) undoSpans() []span {
	var out []span
	for _, st := range p.Steps[:p.undoTo(len(p.Steps))+1] {
		if st.Kind != StepTruncate && st.Off < p.OldSize {
			out = append(out, span{st.Off, min(st.Off+st.Len, p.OldSize)})
		}
	}
	return out
}

// planFile reads the file rc reads, plans e and verifies the planned
// result: every invariant the original met must still hold, and the
// result must carry the requested values.
func planFile(rc *readCache, size int64, e *Edit, keepOld bool) (*Result, error) {
	f, err := NewFileToEdit(rc, size)
	if err != nil {
		return nil, err
	}
	f.keepOld = keepOld
	plan, err := f.Plan(*e)
	if err != nil {
		return nil, err
	}
	res := &Result{Plan: plan, Before: f.Info(), After: f.Info()}
	if plan.IsNoOp() {
		return res, nil
	}
	after, err := plan.check(e)
	if err != nil {
		return nil, err
	}
	res.After, res.Changed = after.Info(), true
	return res, nil
}

// reopenForWriting opens the file rf reads for writing. Through
// /proc/self/fd the open reaches the very file rf has open, with the
// permission checks of an open by path; without /proc the path is opened
// again and must still name that file.
func reopenForWriting(rf *fdFile, path string, nofollow int) (*fdFile, error) {
	wf, err := openFD("/proc/self/fd/"+strconv.Itoa(rf.fd), syscall.O_RDWR)
	if err == nil || !errors.Is(err, syscall.ENOENT) {
		return wf, err
	}
	if wf, err = openFD(path, syscall.O_RDWR|nofollow); err != nil {
		return nil, err
	}
	rst, rerr := rf.stat()
	wst, werr := wf.stat()
	if rerr != nil || werr != nil || rst.Dev != wst.Dev || rst.Ino != wst.Ino {
		wf.Close()
		return nil, fmt.Errorf("replaced by another file while being edited")
	}
	return wf, nil
}

// cachedTarget writes to a file and reads from it through the cache of
// what it held before the plan ran (for the undo copies).
type cachedTarget struct {
	*fdFile
	c *readCache
}

// oldBytes lends the bytes the file held at [off, off+n) when the cache
// holds them in one piece. They stay as they are while the plan is
// applied: nothing reads through the cache then (ReadAt copies only what
// it holds), so no window is replaced, and the cache is closed after.
func (t cachedTarget) oldBytes(off, n int64) ([]byte, bool) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.c.viewLocked(off, n)
}

func (t cachedTarget) ReadAt(b []byte, off int64) (int, error) {
	if t.c.cachedOnly(b, off) {
		return len(b), nil
	}
	return t.fdFile.ReadAt(b, off)
}

// keepMode puts back the setuid and setgid bits that Linux clears when a
// process without CAP_FSETID (anyone but root) writes to or truncates the
// file: patching must not silently drop them. old is the st_mode before.
func keepMode(f *fdFile, old uint32) error {
	const special = syscall.S_ISUID | syscall.S_ISGID | syscall.S_ISVTX
	if old&(syscall.S_ISUID|syscall.S_ISGID) == 0 {
		return nil
	}
	st, err := f.stat()
	if err != nil {
		return unwrapPath(err)
	}
	if st.Mode == old {
		return nil
	}
	if err := f.Chmod(old & (0o777 | special)); err != nil {
		return fmt.Errorf("restoring mode %v: %w", fileMode(old), unwrapPath(err))
	}
	return nil
}

// fileMode is st_mode as an os.FileMode (permission and special bits).
func fileMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&syscall.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// applyCopy writes the result to a temporary copy in the same directory and
// renames it over path, so the other hard links keep the old content.
func applyCopy(path string, src io.ReaderAt, st *syscall.Stat_t, plan *Plan, sync bool) error {
	// A symbolic link stays: its target is what gets replaced, as when
	// the file is edited in place (with NoFollow, a link never gets here).
	path, err := filepath.EvalSymlinks(path)
	if err != nil {
		return unwrapPath(err)
	}
	var tst syscall.Stat_t
	if err := syscall.Stat(path, &tst); err != nil || tst.Dev != st.Dev || tst.Ino != st.Ino {
		return fmt.Errorf("replaced by another file while being edited")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".cudapatch-*")
	if err != nil {
		return unwrapPath(err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, io.NewSectionReader(src, 0, st.Size)); err != nil {
		return fmt.Errorf("copying: %w", unwrapPath(err))
	}
	if err := plan.Apply(tmp, sync); err != nil {
		return err
	}
	// Chown before chmod: chown clears the setuid and setgid bits, even
	// for root.
	_ = tmp.Chown(int(st.Uid), int(st.Gid)) // only root can; others keep their own
	if err := tmp.Chmod(fileMode(st.Mode)); err != nil {
		return unwrapPath(err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return unwrapPath(err)
	}
	ok = true
	return nil
}

// openErr is unwrapPath, with the ELOOP of O_NOFOLLOW said plainly.
func openErr(err error, nofollow bool) error {
	if nofollow && errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("is a symbolic link (not followed)")
	}
	return unwrapPath(err)
}

// forWriting is the error of an open for writing, without the path
// (EditFile and the caller add it once): "opening for writing: permission
// denied" says what was refused, which "open: permission denied" does
// not, for a file that was read.
func forWriting(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("opening for writing: %w", pe.Err)
	}
	return err
}

// unwrapPath drops the path from *PathError, since EditFile adds it once.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
