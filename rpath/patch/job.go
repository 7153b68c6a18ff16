package patch

import (
	"context"
	"sync"

	"github.com/cudapatch/cudapatch/internal/confine"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// job is one Run: its options, and the state the run builds and shares
// between its phases and its workers. Run makes it; the options are never
// changed by the run.
type job struct {
	*config
	big     *bigGate
	kept    *planBudget      // the bytes the plans kept for the write phase may take
	batch   *elfedit.Batch   // the files' edits, prepared by decide, committed by write
	bufs    *elfedit.Buffers // batch's, lent to every file read, by every worker
	share   *share           // one read of a library for its probe and its decide
	libcHas *sync.Map        // name → whether the libc directory has it
	sym     *symbolCheck     // the symbol check; nil when off
	open    openFunc         // through bufs, below the roots for an edit
	// dirs are the roots Run opened (collect): the files it decides and
	// writes below them are opened from them (dirOf).
	dirs []*confine.Dir
	// claims bounds the files held open and locked from decide to write.
	claims *claimBudget
	// links are the files with several hard links one of whose names
	// holds the claim (hardLinks).
	links linkClaims
}

func newJob(c *config) *job {
	b := &elfedit.Batch{}
	j := &job{config: c, batch: b, bufs: &b.Buffers, libcHas: &sync.Map{}}
	j.open = func(path string, edit bool) (*elfedit.File, error) {
		// A file to decide (edit) is opened below its root without
		// following a link; the index's other reads follow the links
		// libraries are found by.
		if d := j.dirOf(path); edit && d != nil {
			return j.batch.OpenForEditIn(d, path)
		}
		if edit {
			return j.batch.OpenForEdit(path)
		}
		return j.bufs.Open(path)
	}
	if c.wrapOpen != nil {
		j.open = c.wrapOpen(j.open)
	}
	if c.heldClaims != nil {
		j.claims = &claimBudget{}
		j.claims.left.Store(*c.heldClaims)
	} else {
		j.claims = newClaimBudget()
	}
	return j
}

// index makes the library index (buildIndex, unless a test gives another).
func (j *job) index(ctx context.Context, roots []string, below map[string][]string) (resolver, error) {
	if j.newIndex != nil {
		return j.newIndex(ctx, j, roots, below)
	}
	return buildIndex(ctx, j, roots, below)
}
