package elfedit

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
)

// A tree is written only when every file of it can be, and a file only
// over the bytes it was planned from. A claim (Pending.Claim) holds a
// file from its planning to the end of its write: opened for writing (a file the user
// may not write fails while deciding), locked with flock(LOCK_EX|LOCK_NB)
// so a second run fails instead of interleaving, and its identity
// (device, inode, link count, size, mtime, ctime) checked again before
// the first byte is written, and once more, with its path, just before
// and after the commit (guarded.beforeCommit). A writer that takes no
// lock is caught by those checks and by the size checks around every
// appending write; a hard link made or a path renamed, which no lock
// stops, by the link count and the path.

// ErrLocked means another process holds the file's lock: another run of
// cudapatch, or a tool that locks what it writes.
var ErrLocked = errors.New("locked by another process (another cudapatch run?); left as it is")

// ErrChanged means the file changed since it was read: another process
// wrote to it (one that takes no lock, or one that took the lock before
// this claim did).
var ErrChanged = errors.New("changed by another process since it was read")

// fileClaim is a file opened for writing and locked, from its planning to
// its write (Pending.Commit, which takes it over), or released meanwhile
// to spare descriptors and taken again, checked, when written.
type fileClaim struct {
	path string
	fd   *fdFile // nil once released
	id   fileIdent
	// reopen and where are the read descriptor's: the path opened
	// again the way it was found, and stat of what it names now.
	reopen func(flags int) (*fdFile, error)
	where  func() (*syscall.Stat_t, error)
}

// pathSource is the read cache and the descriptor of a file opened from
// a path (Buffers.Open, OpenIn, Batch.OpenForEdit, OpenForEditIn); false
// for another.
func (f *File) pathSource() (*readCache, *fdFile, bool) {
	r := f.r
	if v, ok := r.(*recoveryView); ok {
		// Read as the journal of an edit leaves it (NewFileToEdit): still the
		// file opened, whose lock says whether that edit is another
		// process's at work or one a killed process left.
		r = v.base
	}
	c, ok := r.(*readCache)
	var rf *fdFile
	if ok {
		rf, ok = c.f.(*fdFile)
	}
	return c, rf, ok
}

// newClaim opens the file f reads for writing and locks it. It fails when
// the user may not write it, another process holds its lock, or it
// changed since f read it. f must have been opened from a path
// (pathSource).
func (f *File) newClaim() (*fileClaim, error) {
	c, rf, ok := f.pathSource()
	if !ok {
		return nil, errors.New("claim: not a file opened from a path")
	}
	cl := &fileClaim{path: rf.name, id: c.opened, reopen: rf.reopen, where: rf.where}
	// Through /proc/self/fd the open reaches the very file rf has open
	// (no path is resolved again), with the permission checks of an
	// open by path; without /proc the path is opened again as it was.
	wf, err := openFD("/proc/self/fd/"+strconv.Itoa(rf.fd), syscall.O_RDWR|syscall.O_NONBLOCK)
	if errors.Is(err, syscall.ENOENT) && rf.reopen != nil {
		wf, err = rf.reopen(syscall.O_RDWR | syscall.O_NONBLOCK)
	}
	if err != nil {
		return nil, forWriting(err)
	}
	if err := cl.lock(wf); err != nil {
		wf.Close()
		return nil, err
	}
	cl.fd = wf
	return cl, nil
}

// lock flocks wf and checks that it is the file claimed, as it was read.
func (cl *fileClaim) lock(wf *fdFile) error {
	for {
		err := syscall.Flock(wf.fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return ErrLocked
		}
		if err != nil {
			return fmt.Errorf("flock: %w", err)
		}
		wf.locked = true
		break
	}
	st, err := wf.stat()
	if err != nil {
		return unwrapPath(err)
	}
	return cl.same(st)
}

// same checks that st is the claimed file with the identity it had when
// read.
func (cl *fileClaim) same(st *syscall.Stat_t) error {
	now := identOf(st)
	switch {
	case now.dev != cl.id.dev || now.ino != cl.id.ino:
		return fmt.Errorf("replaced by another file since it was read; left as it is")
	case now.nlink != cl.id.nlink:
		return fmt.Errorf("%w: %s; left as it is", ErrChanged, linksChanged(cl.id.nlink, now.nlink))
	case now.size != cl.id.size:
		return fmt.Errorf("%w: %d bytes, now %d; left as it is", ErrChanged, cl.id.size, now.size)
	case now != cl.id:
		return fmt.Errorf("%w: modified; left as it is", ErrChanged)
	}
	return nil
}

// Release closes the claim's descriptor, and with it the lock; the write
// (Pending.Commit) takes both again and checks the file is the same. For
// batches with more files to write than descriptors to hold. A nil claim
// is a no-op.
func (cl *fileClaim) Release() {
	if cl != nil && cl.fd != nil {
		cl.fd.Close()
		cl.fd = nil
	}
}

// Close releases the claim for good; a nil or released one is a no-op.
func (cl *fileClaim) Close() error {
	cl.Release()
	return nil
}

// take returns the claim's descriptor, open for writing, locked and
// checked: the one held since the claim, or, for a released claim, the
// path opened again as it was found. Either way the path must still name
// the file: a directory on the way replaced by a link (or the file by
// another) fails. The claim gives the descriptor up to the caller, with
// its stat.
func (cl *fileClaim) take() (*fdFile, *syscall.Stat_t, error) {
	wf := cl.fd
	cl.fd = nil
	if wf == nil {
		if cl.reopen == nil {
			return nil, nil, errors.New("claim released and cannot be taken again")
		}
		var err error
		if wf, err = cl.reopen(syscall.O_RDWR | syscall.O_NONBLOCK); err != nil {
			if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
				return nil, nil, unwrapPath(err)
			}
			return nil, nil, fmt.Errorf("no longer found where it was: %w", unwrapPath(err))
		}
		if err := cl.lock(wf); err != nil {
			wf.Close()
			return nil, nil, err
		}
	}
	st, err := wf.stat()
	if err == nil && cl.where != nil {
		var now *syscall.Stat_t
		if now, err = cl.where(); err != nil {
			err = fmt.Errorf("no longer found where it was: %w", unwrapPath(err))
		} else if now.Dev != st.Dev || now.Ino != st.Ino {
			err = errors.New("its path names another file since it was read; left as it is")
		}
	}
	if err == nil {
		err = cl.same(st)
	}
	if err != nil {
		wf.Close()
		return nil, nil, unwrapPath(err)
	}
	return wf, st, nil
}

// Identity is which file a File reads and how many names it has.
type Identity struct {
	Dev, Ino uint64
	Links    uint64 // the link count
}

// Identity is the file's as stat said when it was opened; false for a
// File not opened from a path (NewFile).
func (f *File) Identity() (Identity, bool) {
	r := f.r
	if o, ok := r.(*overlay); ok {
		r = o.base
	}
	c, ok := r.(*readCache)
	if !ok {
		return Identity{}, false
	}
	if _, ok := c.f.(*fdFile); !ok {
		return Identity{}, false
	}
	return Identity{Dev: c.opened.dev, Ino: c.opened.ino, Links: c.opened.nlink}, true
}
