package elfedit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A plan of more than one write, killed between two of them, leaves a
// file that loads as the original or the result but that an edit run
// again would plan from wrongly (a second region, symbols moved twice, an
// old store path never cleared). So before its first write such a plan
// appends a journal past the end of the old and the new file: the
// commit's bytes, the old bytes of every range written up to the commit
// (undo), what is written after it (redo), and a checksummed trailer. Its
// last step cuts the journal away. A file opened for an edit
// (NewFileToEdit) that ends in one is read as the interrupted edit leaves
// it, finished when the commit's bytes are in place, else undone, and
// every plan made from it writes that state first (Plan.recover). A file
// read otherwise (NewFile) is read as the loader maps it: the journal is
// only noted (File.Interrupted).
//
// The journal is a crash-recovery aid, never an input channel: it is
// recovered only in the shape a run of this package writes (the trailer's
// own checksum, the sizes it derives, its place in the file), within the
// bounds the encoder keeps to (maxJournalBody, maxJournalRecords, what the
// records write at most), each checked against the file before anything
// is allocated or read past the trailer; anything else is no journal.
//
// Its own write is vouched for, and never lands on another process's
// bytes. First the reservation: from the old end to past the trailer,
// appended with O_APPEND (so an unlocked appender's bytes are never
// overwritten: they land before or after it, and the size read back says
// so), every byte of it a fill pattern that names the old end, then the
// trailer. The kernel copies a write page by page and stops for a fatal
// signal only between pages, and the trailer never straddles a page, so a
// kill leaves the old file, a file that ends in the pattern, or the whole
// reservation. Then the body, into the reservation, which is the file's
// own bytes by then. A file that ends in the pattern (fillTail), or in a
// trailer whose body does not match its checksum, is a journal whose write
// was interrupted: nothing of the plan was written yet, and the recovery
// cuts the file back to its old size. When the old end lies within 15
// bytes of a page boundary, a kill between that page and the next leaves
// fewer bytes than one pattern unit; the file's ELF contents, ending
// exactly there, then name the old end (shortTail). Only a file with bytes
// past its ELF contents keeps them then (docs/reliability.md).

// journalMagic ends a journal: the last eight bytes of a file whose edit
// was interrupted. The last byte is the format's version.
var journalMagic = [8]byte{0x7f, 'c', 'u', 'd', 'a', 'j', 'n', 2}

// fillMagic starts each 16-byte unit of a reservation's fill pattern; the
// unit's other eight bytes are the old end (little-endian). Units start at
// the old end, so the pattern names where a cut write began.
var fillMagic = [8]byte{0x7f, 'c', 'u', 'd', 'a', 'r', 's', 1}

const fillUnit = 16

// fillByte is byte x (a file offset) of the fill pattern of a reservation
// that starts at s.
func fillByte(s, x int64) byte {
	i := (x - s) % fillUnit
	if i < 8 {
		return fillMagic[i]
	}
	return byte(uint64(s) >> (8 * (i - 8)))
}

// fill writes the fill pattern of a reservation that starts at s into b,
// which holds the file from off: one unit, then copies of what is done.
func fill(b []byte, s, off int64) {
	var u [2 * fillUnit]byte
	for i := range u {
		u[i] = fillByte(s, off+int64(i))
	}
	n := copy(b, u[:])
	for n < len(b) {
		n += copy(b[n:], b[:n-n%fillUnit])
	}
}

// The trailer: old size, new size, body length, the body's SHA-256, the
// SHA-256 of those four, magic; little-endian whatever the file's byte
// order.
const journalTrailer = 3*8 + 2*sha256.Size + 8

// Bounds on what a journal holds, which the encoder keeps to and the
// reader checks before it allocates: the body's bytes, its records, and
// what the records write in all (maxWritten of the journal's start).
const (
	maxJournalBody    = 16 << 20
	maxJournalRecords = 1024
)

// maxWritten bounds the bytes a journal's records write, given where it
// starts: twice the file (the old bytes of what is written up to the
// commit, and what is written after it), plus its own body.
func maxWritten(at, body int64) int64 { return 2*at + body }

// journalPage is the page a trailer does not straddle: the kernel's
// smallest unit of copying a write into the file.
const journalPage = 4096

// Record kinds, in a record's flags word; a fill record's byte is in
// bits 8-15, and it has no data.
const (
	recCommit = 1 // the commit's own bytes: in place means committed
	recUndo   = 2 // old bytes, written back to undo
	recRedo   = 3 // bytes written after the commit, written again to finish
	recFill   = 1 << 4
)

// jstep is a journal record: data, or Len copies of fill.
type jstep struct {
	off, n int64
	data   []byte // nil for a fill
	fill   byte
}

// trailer is a journal's trailer, read and checked.
type trailer struct {
	oldSize, newSize int64
	at, bodyLen      int64 // where the body starts, its length
	tailAt           int64 // where the trailer starts
	bodySum          [sha256.Size]byte
	// cut: the file ends in a reservation's fill pattern, its write cut
	// before the trailer; oldSize is where it starts, tailAt the size.
	cut bool
}

// journal is a parsed journal.
type journal struct {
	trailer
	// pending: the body does not match its checksum, the journal's write
	// was interrupted, and nothing of its plan was written.
	pending    bool
	commit     jstep
	undo, redo []jstep
}

// journalAt is where a plan's journal goes: past every byte of the old and
// the new file, 8-aligned.
func (p *Plan) journalAt() int64 { return alignUp64(max(p.OldSize, p.NewSize), 8) }

func alignUp64(v, a int64) int64 { return (v + a - 1) / a * a }

// trailerAt is where the trailer of a body that ends at end goes:
// 8-aligned, within one page.
func trailerAt(end int64) int64 {
	t := alignUp64(end, 8)
	if t/journalPage != (t+journalTrailer-1)/journalPage {
		t = alignUp64(t, journalPage)
	}
	return t
}

// needsJournal reports whether a plan can be interrupted between two of
// its writes: more than one step, or, with sync, a commit written in two
// parts.
func (p *Plan) needsJournal(sync bool) bool {
	if len(p.Steps) > 1 {
		return true
	}
	return sync && len(p.Steps) == 1 && p.Steps[0].head > 0
}

// encodeJournal encodes the journal of p, given the old bytes of the
// ranges the steps up to the commit write (undo, in step order): its
// body and its trailer. A journal past the bounds a reader accepts is an
// error: nothing is written then.
func (p *Plan) encodeJournal(undo []undoRec) (body, tail []byte, err error) {
	records, written := 0, int64(0)
	rec := func(kind uint64, off int64, data []byte) {
		records++
		written += int64(len(data))
		var h [24]byte
		binary.LittleEndian.PutUint64(h[:], uint64(off))
		binary.LittleEndian.PutUint64(h[8:], uint64(len(data)))
		if c, ok := uniform(data); ok && len(data) > 24 {
			binary.LittleEndian.PutUint64(h[16:], kind|recFill|uint64(c)<<8)
			body = append(body, h[:]...)
			return
		}
		binary.LittleEndian.PutUint64(h[16:], kind)
		body = append(body, h[:]...)
		body = append(body, data...)
		for len(body)%8 != 0 {
			body = append(body, 0)
		}
	}
	committed := false
	for _, st := range p.Steps {
		switch {
		case st.Kind == StepCommit:
			head := st.data
			if st.head > 0 {
				head = st.data[:st.head]
			}
			rec(recCommit, st.Off, head)
			if rest := st.data[len(head):]; len(rest) > 0 {
				rec(recRedo, st.Off+int64(len(head)), rest)
			}
			committed = true
		case st.Kind == StepTruncate:
		case committed:
			rec(recRedo, st.Off, st.data)
		}
	}
	for _, u := range undo {
		rec(recUndo, u.off, u.old)
	}
	at := p.journalAt()
	switch {
	case len(body) > maxJournalBody:
		return nil, nil, fmt.Errorf("the edit's journal would be 0x%x bytes, over the 0x%x a next run reads back", len(body), maxJournalBody)
	case records > maxJournalRecords:
		return nil, nil, fmt.Errorf("the edit's journal would hold %d records, over the %d a next run reads back", records, maxJournalRecords)
	case written > maxWritten(at, int64(len(body))):
		return nil, nil, fmt.Errorf("the edit's journal would write 0x%x bytes, over the 0x%x a next run accepts", written, maxWritten(at, int64(len(body))))
	}
	var t [journalTrailer]byte
	binary.LittleEndian.PutUint64(t[0:], uint64(p.OldSize))
	binary.LittleEndian.PutUint64(t[8:], uint64(p.NewSize))
	binary.LittleEndian.PutUint64(t[16:], uint64(len(body)))
	sum := sha256.Sum256(body)
	copy(t[24:], sum[:])
	head := sha256.Sum256(t[:24+sha256.Size])
	copy(t[24+sha256.Size:], head[:])
	copy(t[24+2*sha256.Size:], journalMagic[:])
	return body, t[:], nil
}

// uniform reports whether b is one byte repeated (zeros, 'X').
func uniform(b []byte) (byte, bool) {
	if len(b) == 0 {
		return 0, false
	}
	c := b[0]
	for _, x := range b {
		if x != c {
			return 0, false
		}
	}
	return c, true
}

// readTrailer returns the trailer the file of the given size ends in, nil
// if it ends in none this package writes: the magic, the trailer's own
// checksum, and sizes that place the body and the trailer where the
// encoder does, inside the file and the bounds; or, if the file ends in
// what a reservation's write cut leaves instead (cutReservation), a cut
// trailer. contentEnd says where the file's ELF contents end
// (File.contentEnd), nil when unknown; it is called only for a tail that
// the cheap checks take for a short cut (shortTail). It reads the file's
// last bytes only.
func readTrailer(r io.ReaderAt, size int64, contentEnd func() int64) (*trailer, error) {
	if size < fillUnit {
		return nil, nil
	}
	t := make([]byte, min(size, journalTrailer))
	if err := readTail(r, t, size-int64(len(t))); err != nil {
		return nil, err
	}
	if len(t) < journalTrailer || !bytes.Equal(t[24+2*sha256.Size:], journalMagic[:]) {
		return cutReservation(t, size, contentEnd), nil
	}
	if sha256.Sum256(t[:24+sha256.Size]) != [sha256.Size]byte(t[24+sha256.Size:24+2*sha256.Size]) {
		return cutReservation(t, size, contentEnd), nil
	}
	old, nw, n := binary.LittleEndian.Uint64(t), binary.LittleEndian.Uint64(t[8:]), binary.LittleEndian.Uint64(t[16:])
	tailAt := uint64(size - journalTrailer)
	if old > tailAt || nw > tailAt || n > maxJournalBody {
		return nil, nil
	}
	tr := &trailer{oldSize: int64(old), newSize: int64(nw), bodyLen: int64(n), tailAt: int64(tailAt)}
	tr.at = alignUp64(max(tr.oldSize, tr.newSize), 8)
	if tr.at+tr.bodyLen > tr.tailAt || trailerAt(tr.at+tr.bodyLen) != tr.tailAt {
		return nil, nil
	}
	copy(tr.bodySum[:], t[24:])
	return tr, nil
}

// fillTail returns the cut trailer of a file of the given size whose last
// bytes, tail, end in a reservation's fill pattern: a whole unit (magic,
// then an old end at or before it, a whole number of units back), then a
// prefix of the next; nil if they do not. Whether every byte from that
// old end is the pattern is for readJournal to check.
func fillTail(tail []byte, size int64) *trailer {
	for part := int64(0); part < fillUnit; part++ {
		u := int64(len(tail)) - fillUnit - part // the last whole unit, in tail
		if u < 0 {
			break
		}
		if !bytes.Equal(tail[u:u+8], fillMagic[:]) {
			continue
		}
		s := int64(binary.LittleEndian.Uint64(tail[u+8:]))
		at := size - int64(len(tail)) + u
		if s < 0 || s > at || (at-s)%fillUnit != 0 {
			continue
		}
		if rest := tail[u+fillUnit:]; notFillIn(rest, s, size-int64(len(rest))) < 0 {
			return &trailer{oldSize: s, newSize: s, at: s, tailAt: size, cut: true}
		}
	}
	return nil
}

// cutReservation is the cut trailer of a file of the given size whose
// last bytes, tail, are what a reservation's write cut at a page boundary
// leaves (fillTail, shortTail); nil if they are not.
func cutReservation(tail []byte, size int64, contentEnd func() int64) *trailer {
	if tr := fillTail(tail, size); tr != nil {
		return tr
	}
	return shortTail(tail, size, contentEnd)
}

// cutPage is the granularity of a cut write: the kernel copies a write a
// page at a time, and no page is smaller.
const cutPage = 4096

// shortTail is the cut trailer of a reservation whose old end lay k bytes
// (0 < k < fillUnit) before a page boundary, its write cut there: the k
// bytes left are the start of one unit, too few to name the old end. The
// file's ELF contents name it instead: a file whose size is a page
// multiple, whose last k bytes are the start of the unit of a reservation
// at size-k, and whose contents end exactly there (contentEnd, nil when
// unknown: File.contentEnd) is that cut write. A file with bytes past its
// contents (a signature, a payload) is not recognised: nothing tells its
// own last bytes from the pattern's.
func shortTail(tail []byte, size int64, contentEnd func() int64) *trailer {
	if size%cutPage != 0 || contentEnd == nil {
		return nil
	}
	for k := int64(1); k < fillUnit && k <= int64(len(tail)); k++ {
		s := size - k
		// The headers only now: a file that ends in no journal almost
		// never gets past the size and the pattern's first bytes.
		if notFillIn(tail[int64(len(tail))-k:], s, s) < 0 && contentEnd() == s {
			return &trailer{oldSize: s, newSize: s, at: s, tailAt: size, cut: true}
		}
	}
	return nil
}

// readJournal returns the journal the file of the given size ends in, nil
// if it ends in none (readTrailer; contentEnd as there). A trailer whose
// body does not match its checksum is a pending journal (its write was
// interrupted), provided the file past its old end holds nothing its
// write had not put there.
func readJournal(r io.ReaderAt, size int64, contentEnd func() int64) (*journal, error) {
	tr, err := readTrailer(r, size, contentEnd)
	if tr == nil || err != nil {
		return nil, err
	}
	j := &journal{trailer: *tr}
	bad := func(format string, args ...any) (*journal, error) {
		return nil, formatErr(j.at, "journal of an interrupted edit: %s; left as it is", fmt.Sprintf(format, args...))
	}
	if j.cut {
		// The reservation's write was cut: every byte from the old end is
		// the pattern, or it is not this package's (nothing is cut then).
		if off, err := notFill(r, j.oldSize, j.oldSize, j.tailAt); err != nil || off >= 0 {
			return nil, err
		}
		j.pending = true
		return j, nil
	}
	// The checksum first, through a fixed buffer: nothing the size of the
	// body is allocated before it holds.
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, j.at, j.bodyLen)); err != nil {
		return nil, err
	}
	if [sha256.Size]byte(h.Sum(nil)) != j.bodySum {
		// Written up to the trailer: the fill pattern the reservation
		// wrote is still there, but for the body's place.
		for _, span := range [][2]int64{{j.oldSize, j.at}, {j.at + j.bodyLen, j.tailAt}} {
			if off, err := notFill(r, j.oldSize, span[0], span[1]); err != nil || off >= 0 {
				if err != nil {
					return nil, err
				}
				return bad("its write was interrupted, but the bytes at 0x%x past the old end are not what it leaves", off)
			}
		}
		j.pending = true
		return j, nil
	}
	body := make([]byte, j.bodyLen)
	if _, err := r.ReadAt(body, j.at); err != nil {
		return nil, err
	}
	if err := j.parse(body); err != nil {
		return bad("%v", err)
	}
	return j, nil
}

// notFill returns the offset of the first byte in [lo, hi) that is not
// the fill pattern of a reservation that starts at s, -1 if none, reading
// through a fixed buffer.
func notFill(r io.ReaderAt, s, lo, hi int64) (int64, error) {
	var buf [32 << 10]byte
	for off := lo; off < hi; {
		b := buf[:min(int64(len(buf)), hi-off)]
		if _, err := r.ReadAt(b, off); err != nil {
			return 0, err
		}
		if i := notFillIn(b, s, off); i >= 0 {
			return off + int64(i), nil
		}
		off += int64(len(b))
	}
	return -1, nil
}

// notFillIn is notFill over b, the file's bytes from off: the index in b
// of the first byte that is not the pattern, -1 if none.
func notFillIn(b []byte, s, off int64) int {
	for i, c := range b {
		if c != fillByte(s, off+int64(i)) {
			return i
		}
	}
	return -1
}

// readTail reads the trailer: from the read cache when it holds it (the
// section header table's window usually does), else with one read of its
// own, which takes no window.
func readTail(r io.ReaderAt, b []byte, off int64) error {
	if c, ok := r.(*readCache); ok {
		if c.cachedOnly(b, off) {
			return nil
		}
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if !closed {
			_, err := c.f.ReadAt(b, off)
			return err
		}
	}
	_, err := r.ReadAt(b, off)
	return err
}

// parse reads the records, within the bounds the encoder keeps to: at
// most maxJournalRecords, each inside the file before the journal, and
// writing at most maxWritten in all.
func (j *journal) parse(body []byte) error {
	commits, records, written := 0, 0, int64(0)
	for len(body) > 0 {
		if len(body) < 24 {
			return errors.New("record header cut short")
		}
		if records++; records > maxJournalRecords {
			return fmt.Errorf("more than %d records", maxJournalRecords)
		}
		off, n, flags := binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint64(body[8:]), binary.LittleEndian.Uint64(body[16:])
		body = body[24:]
		if off > uint64(j.at) || n > uint64(j.at)-off {
			return fmt.Errorf("record 0x%x+0x%x past the journal's start 0x%x", off, n, j.at)
		}
		if written += int64(n); written > maxWritten(j.at, j.bodyLen) {
			return fmt.Errorf("records writing more than 0x%x bytes", maxWritten(j.at, j.bodyLen))
		}
		st := jstep{off: int64(off), n: int64(n)}
		if flags&recFill != 0 {
			st.fill = byte(flags >> 8)
		} else {
			padded := (n + 7) &^ 7
			if padded > uint64(len(body)) {
				return errors.New("record data cut short")
			}
			st.data, body = body[:n:n], body[padded:]
		}
		switch flags & 0xf {
		case recCommit:
			j.commit = st
			commits++
		case recUndo:
			j.undo = append(j.undo, st)
		case recRedo:
			j.redo = append(j.redo, st)
		default:
			return fmt.Errorf("unknown record kind %d", flags&0xf)
		}
	}
	if commits != 1 || j.commit.n == 0 {
		return errors.New("no commit record")
	}
	return nil
}

// recovery is what a file that ends in a journal needs written to be in
// the state its interrupted edit leaves, finished or undone: writes, then
// a cut to size (which drops the journal).
type recovery struct {
	forward bool
	writes  []jstep
	size    int64
}

// recover decides between finishing and undoing: the commit's bytes in
// place mean the commit was written, and with it every write before it.
// A pending journal's plan wrote nothing: the cut alone undoes it.
func (j *journal) recover(r io.ReaderAt) (*recovery, error) {
	if j.pending {
		return &recovery{size: j.oldSize}, nil
	}
	in, err := j.commit.in(r)
	if err != nil {
		return nil, err
	}
	if in {
		return &recovery{forward: true, writes: j.redo, size: j.newSize}, nil
	}
	// The undo records in reverse: where two overlap, the older bytes win.
	w := make([]jstep, len(j.undo))
	for i, u := range j.undo {
		w[len(w)-1-i] = u
	}
	return &recovery{writes: w, size: j.oldSize}, nil
}

// in reports whether the file r reads holds the record's bytes.
func (s jstep) in(r io.ReaderAt) (bool, error) {
	var buf [32 << 10]byte
	for done := int64(0); done < s.n; {
		b := buf[:min(int64(len(buf)), s.n-done)]
		if _, err := r.ReadAt(b, s.off+done); err != nil {
			return false, err
		}
		for i, c := range b {
			if c != s.at(done+int64(i)) {
				return false, nil
			}
		}
		done += int64(len(b))
	}
	return true, nil
}

// at is the record's byte i.
func (s jstep) at(i int64) byte {
	if s.data == nil {
		return s.fill
	}
	return s.data[i]
}

// copyTo writes the record's bytes in [lo, hi) (file offsets) to b,
// which holds the file from off.
func (s jstep) copyTo(b []byte, off, lo, hi int64) {
	dst := b[lo-off : hi-off]
	if s.data != nil {
		copy(dst, s.data[lo-s.off:hi-s.off])
		return
	}
	for i := range dst {
		dst[i] = s.fill
	}
}

// view reads the file as the recovery leaves it.
func (rc *recovery) view(base io.ReaderAt, baseSize int64) io.ReaderAt {
	return &recoveryView{base: base, baseSize: baseSize, rc: rc}
}

// recoveryView reads a file through a recovery's writes.
type recoveryView struct {
	base     io.ReaderAt
	baseSize int64
	rc       *recovery
}

func (v *recoveryView) ReadAt(b []byte, off int64) (int, error) {
	b, err := readBase(v.base, v.baseSize, v.rc.size, b, off)
	if err != nil {
		return 0, err
	}
	n := len(b)
	for _, w := range v.rc.writes {
		if lo, hi := max(off, w.off), min(off+int64(n), w.off+w.n); lo < hi {
			w.copyTo(b, off, lo, hi)
		}
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// apply writes the recovery to t: the writes, then the cut. With sync the
// writes are flushed before the cut takes the journal away. A fill is
// written from a fixed buffer.
func (rc *recovery) apply(t Target, flush func() error) error {
	var fill []byte
	for _, w := range rc.writes {
		if w.data != nil {
			if _, err := t.WriteAt(w.data, w.off); err != nil {
				return fmt.Errorf("writing 0x%x bytes at 0x%x: %w", len(w.data), w.off, err)
			}
			continue
		}
		if fill == nil {
			fill = make([]byte, 64<<10)
		}
		for done := int64(0); done < w.n; {
			b := fill[:min(int64(cap(fill)), w.n-done)]
			for i := range b {
				b[i] = w.fill
			}
			if _, err := t.WriteAt(b, w.off+done); err != nil {
				return fmt.Errorf("writing 0x%x bytes at 0x%x: %w", len(b), w.off+done, err)
			}
			done += int64(len(b))
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return t.Truncate(rc.size)
}

// written is the number of bytes the recovery writes.
func (rc *recovery) written() int64 {
	var n int64
	for _, w := range rc.writes {
		n += w.n
	}
	return n
}

// undoRec is the old bytes at off, which a step up to the commit writes
// over.
type undoRec struct {
	off int64
	old []byte
}
