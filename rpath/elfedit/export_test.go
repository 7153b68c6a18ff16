package elfedit

import (
	"debug/elf"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

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

// JournalPlace is where p's journal goes in the file at path, which
// holds the bytes p was made from: its body and its trailer.
func JournalPlace(t testing.TB, p *Plan, path string) (at, tailAt int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	undos, err := p.undoRecords(osTarget{f})
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := p.encodeJournal(undos)
	if err != nil {
		t.Fatal(err)
	}
	at = p.journalAt()
	return at, trailerAt(at + int64(len(body)))
}

// osTarget reads an os.File as a Target that is never written.
type osTarget struct{ *os.File }

func (osTarget) Truncate(int64) error { return errors.New("read only") }

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

// NewEditingReader is the read cache EditFile and Batch.OpenForEdit
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
func HeldOwnBytes(pe *Pending) int64 {
	p := pe.plan
	if p == nil || p.det == nil {
		return 0
	}
	return int64(len(p.det.lit))
}

// PreparedByIdentity reports whether a prepared plan's fingerprint is the
// file's identity and the bytes its write takes from the file (a settled
// file), rather than every byte the plan was made from.
func PreparedByIdentity(pe *Pending) bool {
	p := pe.plan
	return p != nil && p.fp != nil && p.fp.ident != nil
}

// FingerprintBytes is how many bytes of its file a prepared plan's
// fingerprint covers: what its commit reads again before writing it.
func FingerprintBytes(pe *Pending) int64 {
	var n int64
	for _, s := range pe.plan.fp.spans {
		n += s.end - s.off
	}
	return n
}

// SpoilFingerprint makes a prepared plan's fingerprint disagree with any
// file: what its commit sees when the bytes it reads again have changed
// behind an identity that has not.
func SpoilFingerprint(pe *Pending) { pe.plan.fp.sum++ }

// KeptPlan is the plan a pending edit keeps for its commit (nil if none,
// or once committed or closed): a Result whose Plan it is was written
// from it.
func KeptPlan(pe *Pending) *Plan { return pe.plan }

// PrepareAny is Batch.Prepare for f read from anything (NewFile), to be
// committed to the file at path: what the fingerprint allows, which the
// API, binding an edit to the file it was read from, does not.
func PrepareAny(b *Batch, f *File, e Edit, keep func(held int64) bool, path string) (*Pending, error) {
	return b.prepare(f, e, keep, path, fileIdent{})
}

// CommitAs commits pe as the edit e of the file at path, which need not
// be what it was prepared for: for tests of what the commit checks
// before it writes a kept plan (the edit, the bytes), which the API
// never lets differ.
func CommitAs(pe *Pending, path string, e Edit, opt Options) (*Result, error) {
	pe.path, pe.edit = path, e
	return pe.Commit(opt)
}

// SettleTime is how long a file must go unchanged before it is read for
// its prepared plan to be fingerprinted by identity (prepare.go).
const SettleTime = settleFine

// MergeSpans is mergeSpans over [off, end) pairs.
func MergeSpans(in [][2]int64) [][2]int64 {
	var spans []span
	for _, s := range in {
		spans = append(spans, span{s[0], s[1]})
	}
	var out [][2]int64
	for _, s := range mergeSpans(spans) {
		out = append(out, [2]int64{s.off, s.end})
	}
	return out
}

// Settled is fileIdent.settled for a file whose ctime is ctime.
func Settled(ctime, at time.Time) bool {
	return fileIdent{ctime: syscall.NsecToTimespec(ctime.UnixNano())}.settled(at)
}

// ReadOnlyStringsChunked is ReadOnlyStrings in chunks of the given size,
// so that tests cut strings at every boundary.
func ReadOnlyStringsChunked(f *File, sub []byte, chunk uint64, fn func(s []byte) bool) error {
	return f.readOnlyStrings(sub, chunk, fn)
}

// StringRefs is stringRefs: the .dynstr offsets that symbol and version
// names use.
func StringRefs(f *File) ([]uint64, error) { return f.stringRefs() }

// SymbolCount is symbolCount of the table DT_SYMTAB points to.
func SymbolCount(f *File) (uint64, error) {
	symtab, _ := f.dynVal(elf.DT_SYMTAB)
	es := uint64(sym64Size)
	if f.Header.Class == elf.ELFCLASS32 {
		es = sym32Size
	}
	return f.symbolCount(symtab, es)
}

// CodeHoldsPartChunked is CodeHoldsPart in chunks of the given size.
func CodeHoldsPartChunked(f *File, words [][]byte, part, parts int, chunk uint64) ([]bool, error) {
	return f.codeHolds(words, part, parts, chunk)
}

// IndexAt is indexAt: bytes.Index, looking for sub[k] first.
func IndexAt(b, sub []byte, k int) int { return indexAt(b, sub, k) }

// Rarest is rarest: the position of sub's least frequent byte in b.
func Rarest(b, sub []byte) int { return rarest(b, sub) }
