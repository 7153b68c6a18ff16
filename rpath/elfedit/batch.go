package elfedit

import (
	"errors"
	"fmt"

	"github.com/cudapatch/cudapatch/internal/confine"
)

// A caller that edits many files, and writes none unless it could plan
// them all, works in two steps: it prepares each file's edit, then
// commits each. A Batch lends the buffers every file is read through and
// hands out the prepared edits; a Pending holds, between its two steps,
// everything one file's write reuses: the plan Prepare made and kept,
// and the claim on the file. What it may keep (memory, descriptors) is
// the caller's to bound: Prepare asks the caller whether to keep a plan,
// and the caller decides whether to claim a file and whether to hold its
// descriptor open.

// ErrPendingDone means a pending edit was committed or closed already:
// it is written at most once.
var ErrPendingDone = errors.New("pending edit committed or closed already")

// Batch is the write side of editing many files. It embeds the Buffers
// every file of it is read through: its Open and OpenIn read as theirs
// do, and &b.Buffers lends the same buffers to readers that only read.
// OpenForEdit and OpenForEditIn read a file to be edited; Prepare plans
// an edit of it, kept as a Pending for its commit. The zero value is ready
// to use, and it is safe for concurrent use; a Pending is not.
type Batch struct {
	Buffers
}

// OpenForEdit is Open for a file about to be planned (File.Plan,
// Batch.Prepare): the dynamic-linking tables a plan reads come in one
// read where they lie together (see File.prefetchTables), not a read
// each, and a file that ends in the journal of an interrupted edit reads
// as that edit leaves it (NewFileToEdit). Reading only the headers and
// names, Open reads less.
func (b *Batch) OpenForEdit(path string) (*File, error) {
	return b.Buffers.open(path, true)
}

// OpenForEditIn is OpenForEdit for a file below dir, opened as OpenIn
// opens it, without following any symbolic link; a claim of the file
// (Pending.Claim) reopens it the same way.
func (b *Batch) OpenForEditIn(dir *confine.Dir, path string) (*File, error) {
	return b.Buffers.openInDir(dir, path, true)
}

// Pending is one file's edit, prepared (Batch.Prepare) and not yet
// written: the edit, the plan kept for it if any, and the claim on the
// file once taken (Claim). Commit writes it, at most once; Close lets it
// go unwritten, releasing the claim. A Pending dropped neither committed
// nor closed keeps its file locked until the garbage collector closes the
// claim's descriptor.
type Pending struct {
	b    *Batch
	path string    // the name the file was opened by
	id   fileIdent // the file as it was read
	edit Edit
	// strategy and changed are the plan's, kept or not.
	strategy Strategy
	changed  bool
	plan     *Plan // the plan kept for the commit (detached), nil if none
	held     int64 // what plan holds (Plan.HeldBytes)
	claim    *fileClaim
	done     bool // committed or closed
}

// Prepare plans e for f, a file opened from a path (Batch.OpenForEdit,
// OpenForEditIn, or any Open), and returns it pending for its commit.
// Where f's read cache still holds every byte it read, the planned result
// is verified now, as the commit verifies it, and, if keep (nil keeps
// all) accepts the bytes the plan would hold, the plan is kept, detached
// from f: the commit writes it without planning again while the file
// reads the same. Otherwise the commit plans afresh. keep is asked first
// with 0, before the plan is detached: a keep that refuses that is not
// asked again. f may be closed once Prepare returns, after any Claim.
func (b *Batch) Prepare(f *File, e Edit, keep func(held int64) bool) (*Pending, error) {
	c, rf, ok := f.pathSource()
	if !ok {
		return nil, errors.New("prepare: not a file opened from a path")
	}
	return b.prepare(f, e, keep, rf.name, c.opened)
}

// prepare is Prepare for f, read from the file at path whose identity
// was id.
func (b *Batch) prepare(f *File, e Edit, keep func(held int64) bool, path string, id fileIdent) (*Pending, error) {
	p, err := f.prepare(e, keep)
	if err != nil {
		return nil, err
	}
	pe := &Pending{b: b, path: path, id: id, edit: e, strategy: p.Strategy, changed: !p.IsNoOp()}
	if p.Prepared() {
		pe.plan, pe.held = p, p.HeldBytes()
	}
	return pe, nil
}

// Changed reports whether the prepared plan changes the file.
func (p *Pending) Changed() bool { return p.changed }

// Strategy is the prepared plan's layout. The commit may plan afresh (the
// file changed since), and its Result says what it wrote.
func (p *Pending) Strategy() Strategy { return p.strategy }

// Kept reports whether Prepare kept the plan for the commit.
func (p *Pending) Kept() bool { return p.plan != nil }

// HeldBytes is the memory the kept plan holds (Plan.HeldBytes), what the
// caller's keep accepted; 0 when none was kept. It stays what it was
// after Commit or Close let the plan go, for the caller to count back.
func (p *Pending) HeldBytes() int64 {
	if p == nil {
		return 0
	}
	return p.held
}

// Claim opens the file for writing and locks it, until the commit (or
// Close): a file the user may not write fails now, before anything is
// written; so does one another process holds the lock of (ErrLocked), or
// one that changed since f read it (ErrChanged). f must be the file p was
// prepared from, still open.
func (p *Pending) Claim(f *File) error {
	switch {
	case p.done:
		return ErrPendingDone
	case p.claim != nil:
		return errors.New("claim: claimed already")
	}
	c, rf, ok := f.pathSource()
	if !ok || rf.name != p.path || c.opened != p.id {
		return errors.New("claim: not the file the edit was prepared from, as it read it")
	}
	cl, err := f.newClaim()
	if err != nil {
		return err
	}
	p.claim = cl
	return nil
}

// Claimed reports whether p holds a claim on its file (held open or
// released).
func (p *Pending) Claimed() bool { return p != nil && !p.done && p.claim != nil }

// Release closes the claim's descriptor, and with it the lock, to spare
// descriptors; the commit takes both again and checks the file is the
// one claimed, as it was read. Without a claim it does nothing.
func (p *Pending) Release() {
	if p != nil {
		p.claim.Release()
	}
}

// ClaimFrom takes over q's claim, q a pending edit of the same file under
// another of its names (a hard link): p's commit writes through it, and
// checks that the name q was claimed by still names the file. p must hold
// no claim; q is left without one.
func (p *Pending) ClaimFrom(q *Pending) error {
	switch {
	case p.done || q.done:
		return ErrPendingDone
	case p.claim != nil:
		return errors.New("claim: claimed already")
	case q.claim == nil:
		return errors.New("claim: nothing to take over")
	case p.id.dev != q.id.dev || p.id.ino != q.id.ino:
		return fmt.Errorf("claim: %s is not the file %s names", q.path, p.path)
	}
	p.claim, q.claim = q.claim, nil
	return nil
}

// Commit writes the edit as EditFile does, with what p holds: the file is
// written through the claim's descriptor, if claimed (whatever its path
// names, which must still be the file), else opened by its path; the kept
// plan is written when the file still holds every byte it was made from,
// else the file is planned afresh. It gives the claim up, and a second
// Commit fails with ErrPendingDone. Errors name the path.
func (p *Pending) Commit(opt Options) (*Result, error) {
	if p == nil {
		return nil, ErrPendingDone
	}
	if p.done {
		return nil, fmt.Errorf("%s: %w", p.path, ErrPendingDone)
	}
	p.done = true
	res, err := editFile(p.path, p.edit, opt, batched{bufs: &p.b.Buffers, claim: p.claim, plan: p.plan})
	p.claim.Close()
	p.claim, p.plan = nil, nil
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.path, err)
	}
	return res, nil
}

// Close lets the edit go unwritten: it releases the claim for good and
// drops the kept plan. Closing a committed, closed or nil Pending does
// nothing.
func (p *Pending) Close() error {
	if p == nil || p.done {
		return nil
	}
	p.done = true
	p.claim.Close()
	p.claim, p.plan = nil, nil
	return nil
}

// batched is what a Pending hands its commit (nothing for EditFile): the
// buffers the file is read through, the claim to write through, the plan
// Prepare kept.
type batched struct {
	bufs  *Buffers
	claim *fileClaim
	plan  *Plan
}
