package elfedit

import "io"

// ApplyPrefix runs only the first n steps of p on t, as a process killed
// after its n-th write would leave the file: nothing is rolled back and
// nothing is synced. Crash-safety tests check every prefix.
func ApplyPrefix(p *Plan, t Target, n int) error { return p.apply(t, false, n) }

// ApplyTorn applies the first n steps, then the first k bytes of step n's
// write: a process killed in the middle of that write (the kernel copies a
// write into the file page by page and stops between pages).
func ApplyTorn(p *Plan, t Target, n int, k int64) error {
	if err := p.apply(t, false, n); err != nil {
		return err
	}
	st := p.Steps[n]
	_, err := t.WriteAt(st.data[:k], st.Off)
	return err
}

// CheckResult is what EditFile checks of a planned result before writing.
func CheckResult(before, after *File, e *Edit) error {
	return checkResult(before, before.Verify(), after, e)
}

// CountingReader records the ReadAt calls that reach a file: the range
// each asked for.
type CountingReader struct {
	R io.ReaderAt
	// Ranges lists each call's [off, off+len).
	Ranges [][2]int64
}

func (c *CountingReader) ReadAt(b []byte, off int64) (int, error) {
	c.Ranges = append(c.Ranges, [2]int64{off, off + int64(len(b))})
	return c.R.ReadAt(b, off)
}

// Calls is the number of ReadAt calls.
func (c *CountingReader) Calls() int { return len(c.Ranges) }

// Bytes is the number of bytes the calls asked for.
func (c *CountingReader) Bytes() int {
	n := 0
	for _, r := range c.Ranges {
		n += int(r[1] - r[0])
	}
	return n
}

func (c *CountingReader) Close() error { return nil }

// CachedReader is the read cache Open and EditFile read files through,
// over src.
type CachedReader interface {
	io.ReaderAt
	io.Closer
}

// NewCachedReader returns the read cache over src, of the given size.
func NewCachedReader(src *CountingReader, size int64, bufs *Buffers) CachedReader {
	return newReadCache(src, size, bufs)
}

// NewEditingReader is the read cache EditFile and Buffers.OpenForEdit
// read a file about to be planned through: it prefetches the tables.
func NewEditingReader(src *CountingReader, size int64, bufs *Buffers) CachedReader {
	c := newReadCache(src, size, bufs)
	c.editing = true
	return c
}

// CommitHead is, for a commit that took in the hygiene after it, the
// length of the commit's own bytes; 0 otherwise.
func CommitHead(s Step) int64 { return s.head }

// HeldOwnBytes is what a detached plan holds as bytes of its own: what
// is new, and the patches of its copies (detach.go).
func HeldOwnBytes(p *Plan) int64 {
	if p.det == nil {
		return 0
	}
	return int64(len(p.det.lit))
}
