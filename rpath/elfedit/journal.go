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
// last step cuts the journal away. NewFile reads a file that ends in one
// as the interrupted edit leaves it, finished when the commit's bytes are
// in place, else undone, and every plan made from it writes that state
// first (Plan.recover).

// journalMagic ends a journal: the last eight bytes of a file whose edit
// was interrupted.
var journalMagic = [8]byte{0x7f, 'c', 'u', 'd', 'a', 'j', 'n', 1}

// The trailer: old size, new size, body length, checksum (SHA-256 of the
// body and the three sizes), magic; little-endian whatever the file's
// byte order.
const journalTrailer = 3*8 + sha256.Size + 8

// Record kinds, in a record's flags word; a fill record's byte is in
// bits 8-15, and it has no data.
const (
	recCommit = 1 // the commit's own bytes: in place means committed
	recUndo   = 2 // old bytes, written back to undo
	recRedo   = 3 // bytes written after the commit, written again to finish
	recFill   = 1 << 4
)

// journal is a parsed journal.
type journal struct {
	oldSize, newSize int64
	at               int64 // where it starts: the end of the file's own bytes
	commit           Step
	undo, redo       []Step
}

// journalAt is where a plan's journal goes: past every byte of the old and
// the new file, 8-aligned.
func (p *Plan) journalAt() int64 { return alignUp64(max(p.OldSize, p.NewSize), 8) }

func alignUp64(v, a int64) int64 { return (v + a - 1) / a * a }

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
// ranges the steps up to the commit write (undo, in step order).
func (p *Plan) encodeJournal(undo []undoRec) []byte {
	var body []byte
	rec := func(kind uint64, off int64, data []byte) {
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
	var t [journalTrailer]byte
	binary.LittleEndian.PutUint64(t[0:], uint64(p.OldSize))
	binary.LittleEndian.PutUint64(t[8:], uint64(p.NewSize))
	binary.LittleEndian.PutUint64(t[16:], uint64(len(body)))
	sum := journalSum(body, t[:24])
	copy(t[24:], sum[:])
	copy(t[24+sha256.Size:], journalMagic[:])
	return append(body, t[:]...)
}

func journalSum(body, sizes []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(body)
	h.Write(sizes)
	var s [sha256.Size]byte
	h.Sum(s[:0])
	return s
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

// readJournal returns the journal the file of the given size ends in, nil
// if it ends in none. A journal whose checksum or bounds do not hold is
// no journal: the bytes are the file's own.
func readJournal(r io.ReaderAt, size int64) (*journal, error) {
	if size < journalTrailer {
		return nil, nil
	}
	t := make([]byte, journalTrailer)
	if err := readTail(r, t, size-journalTrailer); err != nil {
		return nil, err
	}
	if !bytes.Equal(t[24+sha256.Size:], journalMagic[:]) {
		return nil, nil
	}
	j := &journal{oldSize: int64(binary.LittleEndian.Uint64(t)), newSize: int64(binary.LittleEndian.Uint64(t[8:]))}
	n := binary.LittleEndian.Uint64(t[16:])
	if n > uint64(size-journalTrailer) || j.oldSize < 0 || j.newSize < 0 {
		return nil, nil
	}
	j.at = size - journalTrailer - int64(n)
	if j.at != alignUp64(max(j.oldSize, j.newSize), 8) {
		return nil, nil
	}
	body := make([]byte, n)
	if _, err := r.ReadAt(body, j.at); err != nil {
		return nil, err
	}
	if journalSum(body, t[:24]) != [sha256.Size]byte(t[24:24+sha256.Size]) {
		return nil, nil
	}
	if err := j.parse(body); err != nil {
		return nil, formatErr(j.at, "journal of an interrupted edit: %v", err)
	}
	return j, nil
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

func (j *journal) parse(body []byte) error {
	commits := 0
	for len(body) > 0 {
		if len(body) < 24 {
			return errors.New("record header cut short")
		}
		off, n, flags := binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint64(body[8:]), binary.LittleEndian.Uint64(body[16:])
		body = body[24:]
		if off > uint64(j.at) || n > uint64(j.at)-off {
			return fmt.Errorf("record 0x%x+0x%x past the journal's start 0x%x", off, n, j.at)
		}
		var data []byte
		if flags&recFill != 0 {
			data = bytes.Repeat([]byte{byte(flags >> 8)}, int(n))
		} else {
			padded := (n + 7) &^ 7
			if padded > uint64(len(body)) {
				return errors.New("record data cut short")
			}
			data, body = body[:n], body[padded:]
		}
		st := Step{Off: int64(off), Len: int64(n), data: data}
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
	if commits != 1 || j.commit.Len == 0 {
		return errors.New("no commit record")
	}
	return nil
}

// recovery is what a file that ends in a journal needs written to be in
// the state its interrupted edit leaves, finished or undone: writes, then
// a cut to size (which drops the journal).
type recovery struct {
	forward bool
	writes  []Step
	size    int64
}

// recover decides between finishing and undoing: the commit's bytes in
// place mean the commit was written, and with it every write before it.
func (j *journal) recover(r io.ReaderAt) (*recovery, error) {
	cur := make([]byte, j.commit.Len)
	if _, err := r.ReadAt(cur, j.commit.Off); err != nil {
		return nil, err
	}
	if bytes.Equal(cur, j.commit.data) {
		return &recovery{forward: true, writes: j.redo, size: j.newSize}, nil
	}
	// The undo records in reverse: where two overlap, the older bytes win.
	w := make([]Step, len(j.undo))
	for i, u := range j.undo {
		w[len(w)-1-i] = u
	}
	return &recovery{writes: w, size: j.oldSize}, nil
}

// view reads the file as the recovery leaves it.
func (rc *recovery) view(base io.ReaderAt, baseSize int64) io.ReaderAt {
	return &overlay{base: base, baseSize: baseSize, steps: rc.writes, size: rc.size}
}

// apply writes the recovery to t: the writes, then the cut. With sync the
// writes are flushed before the cut takes the journal away.
func (rc *recovery) apply(t Target, flush func() error) error {
	for _, w := range rc.writes {
		if _, err := t.WriteAt(w.data, w.Off); err != nil {
			return fmt.Errorf("writing 0x%x bytes at 0x%x: %w", len(w.data), w.Off, err)
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
		n += w.Len
	}
	return n
}

// undoRec is the old bytes at off, which a step up to the commit writes
// over.
type undoRec struct {
	off int64
	old []byte
}
