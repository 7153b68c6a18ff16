package patch

import (
	"path/filepath"
	"sync"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// A library of the tree being patched is read twice before it is written:
// by the index, whose probe reads its headers when a name may resolve to
// it, and by deciding it. Past 128 KiB each read is three or four read
// calls (the head, the section headers, the tables), so a library read
// by both and once more to be written would take nine to twelve.
// share makes the first two reads one, whichever comes first:
//
//   - deciding a library records what a probe of it would read (seed), so a
//     later probe reads nothing;
//   - a probe of a library not yet decided reads it as deciding does
//     (elfedit.Batch.OpenForEdit) and parks it, open, for its decide to
//     take, as long as what parked files hold stays within a budget.
//
// Neither waits for the other: a decide that finds nothing parked, or a
// probe that finds the file taken, reads for itself, as before.
type share struct {
	mu    sync.Mutex
	files map[string]*shared // the files Run decides, by path
	left  int64              // the bytes parked files may still hold
}

// shared is the state of one file Run decides.
type shared struct {
	taken  bool          // its decide has begun
	parked *elfedit.File // read by a probe, for its decide
	held   int64         // what parked holds
	seed   *probe        // what its decide read, for the index's probes
}

// parkedPerJob is the budget of parked files' bytes, per job. A parked
// library holds its head, section-header window and tables: a few hundred
// KiB for most libraries. Most are taken soon (the jobs decide the tree in
// order, and a library is probed when a file near it needs it), so a
// larger budget saves few reads, and what is parked is live memory under
// the run's heap limit.
const parkedPerJob = 1 << 20

// newShare returns the share for the files Run decides, found by collect.
func newShare(files []found, jobs int) *share {
	s := &share{files: make(map[string]*shared, len(files)), left: int64(max(jobs, 1)) * parkedPerJob}
	for _, f := range files {
		if soPattern.Match(filepath.Base(f.path)) {
			s.files[f.path] = &shared{}
		}
	}
	return s
}

// take marks the file at path as being decided and returns what a probe
// parked of it (nil if nothing).
func (s *share) take(path string) *elfedit.File {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.files[path]
	if sh == nil {
		return nil
	}
	sh.taken = true
	f := sh.parked
	sh.parked = nil
	s.left += sh.held
	return f
}

// wanted reports whether a probe of path should read it for its decide: it
// is one of the files Run decides, not yet taken, nor parked.
func (s *share) wanted(path string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.files[path]
	return sh != nil && !sh.taken && sh.parked == nil
}

// park keeps f, a probe's read of path, for its decide, and reports
// whether it did; if not (the decide took the file meanwhile, or the budget
// is spent), the caller closes f.
func (s *share) park(path string, f *elfedit.File) bool {
	if s == nil {
		return false
	}
	n := f.HeldBytes()
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.files[path]
	if sh == nil || sh.taken || sh.parked != nil || n > s.left {
		return false
	}
	sh.parked, sh.held = f, n
	s.left -= n
	return true
}

// seed records what f, the file at path being decided, says to a probe.
func (s *share) seed(path string, f *elfedit.File) {
	if s == nil {
		return
	}
	s.mu.Lock()
	sh := s.files[path]
	s.mu.Unlock()
	if sh == nil {
		return
	}
	pr := &probe{}
	pr.fill(f, path, filepath.Dir(path))
	s.mu.Lock()
	sh.seed = pr
	s.mu.Unlock()
}

// seeded returns what deciding the file at path read, if it was decided.
func (s *share) seeded(path string) *probe {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh := s.files[path]; sh != nil {
		return sh.seed
	}
	return nil
}

// close closes the files still parked: none after every file was decided,
// some after a run was canceled.
func (s *share) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sh := range s.files {
		if sh.parked != nil {
			sh.parked.Close()
			sh.parked = nil
		}
	}
}
