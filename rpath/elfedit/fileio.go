package elfedit

import (
	"errors"
	"io"
	"math/bits"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cudapatch/cudapatch/internal/confine"
)

// This file is how Open and EditFile talk to the kernel. Patching a tree
// costs, per file, a few header reads and a few small writes, so their
// number is the cost: a File reads through a window cache that takes the
// first 64 KiB (headers, and in small files everything: notes, .dynsym,
// .dynstr, .dynamic, the section headers) in one read, a file of up to
// 128 KiB whole, and each later miss in one more of 16 to 64 KiB;
// descriptors are used with pread and pwrite directly,
// because os.File registers every descriptor with the runtime's poller
// (fcntl and epoll_ctl calls that fail for regular files: five wasted
// system calls per open).

// windowSize is the size of the cache's head read, and the most a later
// miss reads.
const windowSize = 64 << 10

// missWindow is the least a later miss reads, back from the end of the
// page it ends in: most misses are the section headers at the end of the
// file, with .shstrtab right before them, a few KiB, and a copy of 64 KiB
// from the page cache costs several system calls' worth. On the 600-file
// tree of bench/HISTORY.md a no-op read 27 MB less for 130 more reads;
// 8 KiB saved 4 MB more for 210 more.
const missWindow = 16 << 10

// maxWindows bounds the windows one file keeps besides its head; a larger
// file's later misses reuse the oldest.
const maxWindows = 8

// Buffers lends the buffers files are read through. A tree's files are
// read a few at a time, each through a 64 KiB head; lending the same
// buffers again keeps the garbage collector idle. It also lends the
// scratch a file's planning builds in (lend): the copy of its string
// table, the region, the renumbered symbols. Those die with the file, and
// on a tree of small files they are most of what a run allocates; a heap
// that fills and is collected every few files costs, besides the
// collections, the page faults of memory handed back to the kernel and
// taken again. The zero value is ready to use, and it is safe for
// concurrent use. A nil *Buffers allocates.
//
// Buffers is the read side on its own: Open and OpenIn read files through
// it. A Batch, the write side, embeds the Buffers its files are read
// through, which readers of the same files may share.
type Buffers struct {
	pool    sync.Pool
	scratch [scratchClasses]sync.Pool // by size class: 512 bytes << i
}

// The scratch size classes: powers of two from 512 bytes (most small
// libraries' string tables are a few KiB) to 4 MiB. Smaller slices are
// cheap to allocate; larger ones are few (a file with a big table is
// planned alone by the caller), and pooled they would pin their
// megabytes between collections.
const (
	scratchMinShift = 9
	scratchClasses  = 14
)

// scratchClass is the size class of n bytes, -1 if n is outside them.
func scratchClass(n uint64) int {
	if n < 1<<scratchMinShift || n > 1<<(scratchMinShift+scratchClasses-1) {
		return -1
	}
	return bits.Len64(n-1) - scratchMinShift
}

// lend returns n bytes, from the pool of their size class when there is
// one (the capacity is then the class's size); without a pool it
// allocates. They are zero with zero set; without it, a slice from the
// pool holds what its last borrower left, for a caller that reads over
// all of it (a read of a table: clearing megabytes first cost as much as
// the read). What is lent goes back with giveBack.
func (b *Buffers) lend(n uint64, zero bool) []byte {
	k := scratchClass(n)
	if b == nil || k < 0 {
		return make([]byte, n)
	}
	if v, ok := b.scratch[k].Get().(*[]byte); ok {
		buf := (*v)[:n]
		if zero {
			clear(buf)
		}
		return buf
	}
	return make([]byte, n, 1<<(k+scratchMinShift))
}

// giveBack returns a slice lend made; the caller must not use it again.
// Slices that are not a class's size are left to the collector.
func (b *Buffers) giveBack(buf []byte) {
	k := scratchClass(uint64(cap(buf)))
	if b == nil || k < 0 || cap(buf) != 1<<(k+scratchMinShift) {
		return
	}
	buf = buf[:cap(buf)]
	b.scratch[k].Put(&buf)
}

// get lends a buffer of windowSize bytes; without a pool it allocates
// only the n bytes needed.
func (b *Buffers) get(n int64) []byte {
	if b == nil {
		return make([]byte, n)
	}
	if v, ok := b.pool.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, windowSize)
}

func (b *Buffers) put(buf []byte) {
	if b != nil && cap(buf) == windowSize {
		buf = buf[:windowSize]
		b.pool.Put(&buf)
	}
}

// Open reads the ELF headers and dynamic-linking data of the file at path,
// through a buffer lent by b. The caller must Close the file, which gives
// the buffer back.
func (b *Buffers) Open(path string) (*File, error) {
	return b.open(path, false)
}

func (b *Buffers) open(path string, editing bool) (*File, error) {
	fd, st, at, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	fd.reopen = func(flags int) (*fdFile, error) { return openFD(path, flags|syscall.O_NOFOLLOW) }
	fd.where = func() (*syscall.Stat_t, error) {
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return nil, &os.PathError{Op: "stat", Path: path, Err: err}
		}
		return &st, nil
	}
	return b.openFD(fd, st, at, editing)
}

// OpenIn is Open for a file below dir, opened from dir's descriptor
// without following any symbolic link (confine.Dir): a link anywhere on
// the way fails. As Open, it refuses what is not a regular file before
// opening it (a FIFO would wait for a writer, a device act).
func (b *Buffers) OpenIn(dir *confine.Dir, path string) (*File, error) {
	return b.openInDir(dir, path, false)
}

// openInDir is OpenIn, or Batch.OpenForEditIn with edit set.
func (b *Buffers) openInDir(dir *confine.Dir, path string, edit bool) (*File, error) {
	pre, err := dir.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regularOrErr(path, pre); err != nil {
		return nil, err
	}
	fd, err := openIn(dir, path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	st, err := fd.stat()
	if err == nil {
		err = regularOrErr(path, st)
	}
	if err != nil {
		fd.Close()
		return nil, err
	}
	return b.openFD(fd, st, at, edit)
}

// regularOrErr is nil for a regular file, else the error Open gives.
func regularOrErr(path string, st *syscall.Stat_t) error {
	switch {
	case isRegular(st):
		return nil
	case st.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		return &os.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
	default:
		return &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
}

// openIn opens path below dir, as OpenIn does.
func openIn(dir *confine.Dir, path string, flags int) (*fdFile, error) {
	n, err := dir.OpenFD(path, flags)
	if err != nil {
		return nil, err
	}
	fd := newFD(n, path)
	fd.reopen = func(flags int) (*fdFile, error) { return openIn(dir, path, flags) }
	fd.where = func() (*syscall.Stat_t, error) { return dir.Stat(path) }
	return fd, nil
}

// openFD reads the ELF headers of the file fd has open, whose stat st
// was taken at at.
func (b *Buffers) openFD(fd *fdFile, st *syscall.Stat_t, at time.Time, editing bool) (*File, error) {
	c := newReadCache(fd, st.Size, b)
	c.editing = editing
	c.opened = identOf(st)
	if id := identOf(st); id.settled(at) {
		c.settled = &id
	}
	read := NewFile
	if editing {
		read = NewFileToEdit
	}
	f, err := read(c, st.Size)
	if err != nil {
		c.Close()
		return nil, err
	}
	f.closer = c
	return f, nil
}

// openRegular opens path for reading if it is a regular file, and returns
// its fstat and the time just before it. A FIFO, socket or device is
// refused with ErrNotRegular before it is opened: opening a FIFO for
// reading waits for a writer, and opening a device can act on it (a
// watchdog starts, a tape rewinds). The stat goes first for that; the
// open is non-blocking and checked again on the descriptor, so a path
// swapped for a FIFO between the two is refused, not waited on.
func openRegular(path string) (*fdFile, *syscall.Stat_t, time.Time, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Stat(path, &st)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, nil, time.Time{}, &os.PathError{Op: "open", Path: path, Err: err}
		}
		break
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return nil, nil, time.Time{}, &os.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
	}
	if !isRegular(&st) {
		return nil, nil, time.Time{}, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	fd, err := openFD(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	at := time.Now()
	fst, err := fd.stat()
	if err == nil && !isRegular(fst) {
		err = &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	if err != nil {
		fd.Close()
		return nil, nil, time.Time{}, err
	}
	return fd, fst, at, nil
}

func isRegular(st *syscall.Stat_t) bool { return st.Mode&syscall.S_IFMT == syscall.S_IFREG }

// fdFile is an open file descriptor, read and written with pread and
// pwrite. Like os.File it closes itself if it is dropped unclosed.
type fdFile struct {
	fd      int
	name    string
	cleanup runtime.Cleanup
	closed  bool
	// reopen opens the file's path again the way it was opened (below
	// the same directory, or by path, never through a final link); where
	// stats what that path names now. Both nil for a descriptor opened
	// otherwise.
	reopen func(flags int) (*fdFile, error)
	where  func() (*syscall.Stat_t, error)
	// locked says the descriptor holds a flock (a claim), which Close
	// drops first: a child forked meanwhile and not yet exec'd shares
	// the open file description, and would otherwise hold the lock on.
	locked bool
}

// openFD opens path with flags (O_CLOEXEC added), retrying EINTR.
func openFD(path string, flags int) (*fdFile, error) {
	for {
		fd, err := syscall.Open(path, flags|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return newFD(fd, path), nil
	}
}

// newFD wraps the open descriptor fd of the file at path.
func newFD(fd int, path string) *fdFile {
	f := &fdFile{fd: fd, name: path}
	f.cleanup = runtime.AddCleanup(f, func(fd int) { syscall.Close(fd) }, fd)
	return f
}

// stat is fstat, with the error an os.File would give.
func (f *fdFile) stat() (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if f.closed {
		return nil, &os.PathError{Op: "stat", Path: f.name, Err: os.ErrClosed}
	}
	for {
		err := syscall.Fstat(f.fd, &st)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "stat", Path: f.name, Err: err}
		}
		return &st, nil
	}
}

// ReadAt reads len(b) bytes at off, as os.File.ReadAt does.
func (f *fdFile) ReadAt(b []byte, off int64) (int, error) {
	if f.closed {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: os.ErrClosed}
	}
	n := 0
	for n < len(b) {
		m, err := syscall.Pread(f.fd, b[n:], off+int64(n))
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return n, &os.PathError{Op: "read", Path: f.name, Err: err}
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}

// WriteAt writes b at off, as os.File.WriteAt does.
func (f *fdFile) WriteAt(b []byte, off int64) (int, error) {
	if f.closed {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: os.ErrClosed}
	}
	return f.writeFull(b, func(p []byte, done int) (int, error) { return syscall.Pwrite(f.fd, p, off+int64(done)) })
}

// appendAll appends gap zero bytes, then b, through O_APPEND (at the end
// of the file whatever the offset); the zeros are written from a fixed
// buffer, so a region placed hundreds of MiB past the end needs no buffer
// of its size. It returns how many bytes it appended.
func (f *fdFile) appendAll(gap int64, b []byte) (int, error) {
	return f.appending(func() (int, error) {
		n := 0
		if gap > 0 && gap+int64(len(b)) <= oneWrite {
			// One write, as without a gap: a kill leaves a partial append,
			// never the gap alone.
			tail := make([]byte, gap+int64(len(b)))
			copy(tail[gap:], b)
			b, gap = tail, 0
		}
		for gap > 0 {
			m, err := f.writeAll(zeroBlock[:min(gap, int64(len(zeroBlock)))])
			if n, gap = n+m, gap-int64(m); err != nil {
				return n, err
			}
		}
		m, err := f.writeAll(b)
		return n + m, err
	})
}

// appendFill appends n bytes of the fill pattern of a reservation that
// starts at s (the file's end), then tail, through O_APPEND, from a
// buffer of at most oneWrite bytes. It returns how many bytes it appended.
func (f *fdFile) appendFill(s, n int64, tail []byte) (int, error) {
	return f.appending(func() (int, error) {
		done := 0
		buf := make([]byte, min(n+int64(len(tail)), oneWrite))
		for off := s; off < s+n; {
			b := buf[:min(int64(len(buf)), s+n-off)]
			if off+int64(len(b)) == s+n && len(b)+len(tail) <= len(buf) {
				// The last of the pattern and the trailer in one write.
				fill(b, s, off)
				b = append(b, tail...)
				m, err := f.writeAll(b)
				return done + m, err
			}
			fill(b, s, off)
			m, err := f.writeAll(b)
			if done, off = done+m, off+int64(m); err != nil {
				return done, err
			}
		}
		m, err := f.writeAll(tail)
		return done + m, err
	})
}

// appending runs write with the descriptor in append mode, and leaves it
// as it was: a descriptor left in append mode would append every later
// pwrite (Linux ignores the offset then), which is an error too.
func (f *fdFile) appending(write func() (int, error)) (int, error) {
	if f.closed {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: os.ErrClosed}
	}
	flags, err := fcntl(f.fd, syscall.F_GETFL, 0)
	if err == nil {
		_, err = fcntl(f.fd, syscall.F_SETFL, flags|syscall.O_APPEND)
	}
	if err != nil {
		return 0, &os.PathError{Op: "fcntl", Path: f.name, Err: err}
	}
	n, err := write()
	if _, ferr := fcntl(f.fd, syscall.F_SETFL, flags); ferr != nil && err == nil {
		err = &os.PathError{Op: "fcntl", Path: f.name, Err: ferr}
	}
	return n, err
}

// oneWrite bounds the gap and bytes appendAll writes in one write(2).
const oneWrite = 1 << 20

// zeroBlock is what appendAll writes a longer gap from; never written to.
var zeroBlock [64 << 10]byte

// writeAll is write(2) of all of b at the descriptor's offset.
func (f *fdFile) writeAll(b []byte) (int, error) {
	return f.writeFull(b, func(p []byte, _ int) (int, error) { return syscall.Write(f.fd, p) })
}

// writeFull calls write with what is left of b, done bytes of it written,
// until all of it is, retrying an interrupted call.
func (f *fdFile) writeFull(b []byte, write func(p []byte, done int) (int, error)) (int, error) {
	n := 0
	for n < len(b) {
		m, err := write(b[n:], n)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return n, &os.PathError{Op: "write", Path: f.name, Err: err}
		}
		if m == 0 {
			return n, &os.PathError{Op: "write", Path: f.name, Err: io.ErrShortWrite}
		}
		n += m
	}
	return n, nil
}

func fcntl(fd, cmd, arg int) (int, error) {
	for {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}

// Truncate is ftruncate.
func (f *fdFile) Truncate(size int64) error {
	if f.closed {
		return &os.PathError{Op: "truncate", Path: f.name, Err: os.ErrClosed}
	}
	for {
		err := syscall.Ftruncate(f.fd, size)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "truncate", Path: f.name, Err: err}
		}
		return nil
	}
}

// Sync is fsync.
func (f *fdFile) Sync() error {
	if f.closed {
		return &os.PathError{Op: "sync", Path: f.name, Err: os.ErrClosed}
	}
	for {
		err := syscall.Fsync(f.fd)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "sync", Path: f.name, Err: err}
		}
		return nil
	}
}

// Chmod is fchmod.
func (f *fdFile) Chmod(mode uint32) error {
	if f.closed {
		return &os.PathError{Op: "chmod", Path: f.name, Err: os.ErrClosed}
	}
	for {
		err := syscall.Fchmod(f.fd, mode)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "chmod", Path: f.name, Err: err}
		}
		return nil
	}
}

// Close closes the descriptor; closing twice is an error, as for os.File.
func (f *fdFile) Close() error {
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	f.cleanup.Stop()
	if f.locked {
		_ = syscall.Flock(f.fd, syscall.LOCK_UN) // close drops it anyway, absent other references
	}
	// Linux releases the descriptor even when close fails (EINTR
	// included): never retry.
	if err := syscall.Close(f.fd); err != nil {
		return &os.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

// readCache is an io.ReaderAt over a file that keeps what it read: the
// head of the file, read whole on first use, and up to maxWindows windows
// read around later misses (ending at the miss, since the tables at a
// file's end are read back to front: section headers, then their names
// before them). Reads larger than a window go to the file uncached. Its
// buffers come from, and go back to, a Buffers on Close; after Close it
// reads the closed file, which fails as a closed os.File does.
type readCache struct {
	mu     sync.Mutex
	f      source
	size   int64
	bufs   *Buffers
	head   []byte // the file's first bytes; nil until the first read
	wins   []window
	next   int // the window a miss replaces once maxWindows are held
	closed bool
	// reads lists every read of the file and its bytes, in order: the
	// head, then each window and prefetched range. With neither a read
	// past the cache (bypass) nor a window replaced (evicted, after which
	// a replaced window's bytes are another range's), the cache still
	// holds every byte read, which is what a fingerprint covers
	// (prepare.go).
	reads []window
	// big holds ranges read whole ahead of need (prefetch): never
	// replaced, in scratch lent until Close.
	big []window
	// editing says the file is about to be planned (EditFile,
	// Batch.OpenForEdit): its dynamic-linking tables are read in one
	// read when they lie together (File.prefetchTables).
	editing bool
	bypass  bool
	evicted bool
	// lent is the scratch lent through the cache (File.scratch), given
	// back to bufs on Close.
	lent [][]byte
	// opened is the file's identity when it was opened (a claim checks
	// the file still has it).
	opened fileIdent
	// settled is the file's identity when it was opened, if its ctime
	// was old enough then to show any later write (prepare.go); nil for
	// a file changed too recently and for a source that is not a file.
	settled *fileIdent
}

// span is a range of a file, [off, end).
type span struct{ off, end int64 }

// source is what a readCache reads: an *fdFile, or in tests a counting
// reader.
type source interface {
	io.ReaderAt
	io.Closer
}

type window struct {
	off int64
	b   []byte
}

// span is the range of the file w holds.
func (w window) span() span { return span{w.off, w.off + int64(len(w.b))} }

func newReadCache(f source, size int64, bufs *Buffers) *readCache {
	return &readCache{f: f, size: size, bufs: bufs}
}

// ReadAt implements io.ReaderAt.
func (c *readCache) ReadAt(b []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.f.ReadAt(b, off)
	}
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if c.head == nil {
		if err := c.fillHead(); err != nil {
			return 0, err
		}
	}
	n := 0
	for n < len(b) {
		at := off + int64(n)
		if m, ok := c.cached(b[n:], at); ok {
			n += m
			continue
		}
		if at >= c.size {
			return n, io.EOF
		}
		rest := int64(len(b) - n)
		if rest > windowSize {
			c.bypass = true
			m, err := c.f.ReadAt(b[n:], at)
			return n + m, err
		}
		if err := c.fill(at, rest); err != nil {
			return n, err
		}
	}
	return n, nil
}

// fillHead reads the first window of the file, or the whole file when it
// is at most two windows long: its section headers are at its end, past
// the first window, and the window that would read them would overlap
// the head, reading more bytes in two calls than one call reads whole.
func (c *readCache) fillHead() error {
	var buf []byte
	n := c.size
	if n > windowSize && n <= 2*windowSize {
		buf = c.lendLocked(uint64(n), false)
	} else {
		n = min(int64(windowSize), n)
		buf = c.bufs.get(n)
	}
	m, err := c.f.ReadAt(buf[:n], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		c.bufs.put(buf)
		return err
	}
	c.head = buf[:m]
	c.reads = append(c.reads, window{0, c.head})
	return nil
}

// cached copies what the head or a window holds at off into b.
func (c *readCache) cached(b []byte, off int64) (int, bool) {
	if v := c.viewFrom(off); len(v) > 0 {
		return copy(b, v), true
	}
	return 0, false
}

// prefetch reads [start, end) whole, past what the head holds, into
// scratch kept until Close: the dynamic-linking tables of a file about
// to be planned, which would otherwise take a window or a read past the
// cache each. A failed read leaves the cache as it was (the reads that
// need the bytes then fail or read them as before). The caller holds
// c.mu, and the head has been read.
func (c *readCache) prefetch(start, end int64) {
	start = max(start, int64(len(c.head)))
	end = min(end, c.size)
	if c.closed || start >= end {
		return
	}
	buf := c.lendLocked(uint64(end-start), false)
	m, err := c.f.ReadAt(buf, start)
	if err != nil && !errors.Is(err, io.EOF) || m == 0 {
		return
	}
	c.big = append(c.big, window{off: start, b: buf[:m]})
	c.reads = append(c.reads, window{start, buf[:m]})
}

// view returns the n bytes at off without a copy when the head or a
// prefetched range holds them all: bytes nothing writes to, valid until
// Close (a window may be replaced before then, so none is used).
func (c *readCache) view(off, n int64) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || off < 0 || n <= 0 {
		return nil, false
	}
	if off+n <= int64(len(c.head)) {
		return c.head[off : off+n : off+n], true
	}
	for _, w := range c.big {
		if off >= w.off && off+n <= w.off+int64(len(w.b)) {
			return w.b[off-w.off : off-w.off+n : off-w.off+n], true
		}
	}
	return nil, false
}

// holdsAll reports whether the cache still holds every byte it read: no
// read past it, no window replaced. The caller holds c.mu.
func (c *readCache) holdsAll() bool {
	return !c.closed && !c.bypass && !c.evicted && len(c.reads) == 1+len(c.wins)+len(c.big)
}

// fill reads a window holding [off, off+n), n <= windowSize: the window
// of max(n, missWindow) bytes that ends at the end of the range's last
// page.
func (c *readCache) fill(off, n int64) error {
	end := min(c.size, (off+n+4095)&^4095)
	start := max(0, min(off, end-max(n, missWindow)))
	end = min(end, start+windowSize)
	_, err := c.fillRange(start, end)
	return err
}

// fillRange reads [start, end) of the file, at most windowSize bytes,
// into a window: a new one while fewer than maxWindows are held, else the
// oldest. It returns the bytes read, which the file may have cut short.
func (c *readCache) fillRange(start, end int64) ([]byte, error) {
	i := c.next
	if len(c.wins) < maxWindows {
		c.wins = append(c.wins, window{b: c.bufs.get(windowSize)[:0]})
		i = len(c.wins) - 1
	} else {
		c.next = (c.next + 1) % maxWindows
		c.evicted = true
	}
	buf := c.wins[i].b[:cap(c.wins[i].b)]
	c.wins[i] = window{off: start, b: buf[:0]}
	m, err := c.f.ReadAt(buf[:end-start], start)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if m == 0 {
		return nil, io.EOF // the file is shorter than it was
	}
	c.wins[i].b = buf[:m]
	c.reads = append(c.reads, c.wins[i])
	return buf[:m], nil
}

// cachedOnly copies [off, off+len(b)) into b if the cache holds all of it.
func (c *readCache) cachedOnly(b []byte, off int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.head == nil {
		return false
	}
	for n := 0; n < len(b); {
		m, ok := c.cached(b[n:], off+int64(n))
		if !ok {
			return false
		}
		n += m
	}
	return true
}

// Close gives the buffers back and closes the file.
func (c *readCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		if c.head != nil {
			c.bufs.put(c.head)
		}
		for _, w := range c.wins {
			c.bufs.put(w.b)
		}
		for _, b := range c.lent {
			c.bufs.giveBack(b)
		}
		c.head, c.wins, c.lent, c.big, c.reads = nil, nil, nil, nil, nil
	}
	return c.f.Close()
}

// lend lends n bytes of scratch until Close, zero with zero set (see
// Buffers.lend).
func (c *readCache) lend(n uint64, zero bool) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lendLocked(n, zero)
}

func (c *readCache) lendLocked(n uint64, zero bool) []byte {
	if c.bufs == nil || c.closed || scratchClass(n) < 0 {
		return make([]byte, n)
	}
	b := c.bufs.lend(n, zero)
	c.lent = append(c.lent, b)
	return b
}

// spent reports whether the cache gave its buffers back to a Buffers
// (Close): the head, which the string table may be a view of, and the
// scratch a plan of its file may hold. Nothing planned from the file may
// be written after that (Plan.apply).
func (c *readCache) spent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed && c.bufs != nil
}
