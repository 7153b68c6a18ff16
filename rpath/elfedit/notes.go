package elfedit

import (
	"bytes"
	"debug/elf"
	"slices"
	"strings"
)

// NoteID names an ELF note by its owner (n_name without the terminating NUL)
// and its type (n_type). The type is only meaningful within one owner.
type NoteID struct {
	Owner string `json:"owner"`
	Type  uint32 `json:"type"`
}

// Note is one ELF note.
type Note struct {
	NoteID
	// Desc is the descriptor, exactly n_descsz bytes (padding excluded).
	Desc []byte `json:"desc"`
	// Section is, when read, the name of the SHT_NOTE section header that
	// describes the note ("" if none); when written (Edit.SetNote), the
	// name of the section header to create or update. Loaders ignore it;
	// readelf, objcopy and patchelf find the note by it.
	Section string `json:"section,omitempty"`
	// Loaded is set (when read) for a note inside a PT_NOTE segment: the
	// loaders see only those. A SHT_NOTE section that no PT_NOTE covers
	// (objcopy --add-section makes one) is reported with Loaded false.
	Loaded bool `json:"loaded"`
	// Off is the file offset of the note's header (when read).
	Off int64 `json:"offset"`
}

// noteHeader is the size of n_namesz, n_descsz and n_type: three 4-byte
// words in the file's byte order, for both classes.
const noteHeader = 12

// maxNoteSegment bounds the size of one PT_NOTE or SHT_NOTE section read:
// real ones hold a few hundred bytes; a hostile size must not make a huge
// read.
const maxNoteSegment = 1 << 24

// noteSize is the encoded size of a note with 4-byte alignment: header,
// name with its NUL padded to 4, descriptor padded to 4.
func noteSize(n *Note) uint64 {
	return noteHeader + alignUp(uint64(len(n.Owner))+1, 4) + alignUp(uint64(len(n.Desc)), 4)
}

// encodeNote encodes a note with 4-byte alignment (patchelf's layout:
// n_namesz counts the NUL, n_descsz is the exact descriptor length).
func (f *File) encodeNote(n *Note) []byte {
	b := make([]byte, noteSize(n))
	f.order.PutUint32(b, uint32(len(n.Owner)+1))
	f.order.PutUint32(b[4:], uint32(len(n.Desc)))
	f.order.PutUint32(b[8:], n.Type)
	copy(b[noteHeader:], n.Owner)
	copy(b[noteHeader+alignUp(uint64(len(n.Owner))+1, 4):], n.Desc)
	return b
}

// parsedNote is a note and the file range it takes, padding included.
type parsedNote struct {
	Note
	end uint64 // file offset just past the note (aligned)
}

// parseNotes decodes the notes in b, read from file offset off, with the
// given alignment (4, or 8 for a PT_NOTE or section with p_align 8, as
// the loaders do). what names the container in errors.
func (f *File) parseNotes(b []byte, off, align uint64, what string) ([]parsedNote, error) {
	var out []parsedNote
	n := uint64(len(b))
	for at := uint64(0); at < n; {
		if n-at < noteHeader {
			// Fewer bytes than a header are padding, as the loaders
			// take them. They belong to the note before them: a note
			// edit that keeps that note keeps its container's bytes
			// whole (a PT_NOTE cut short of its section's end would
			// leave the section in no PT_NOTE), and one that removes
			// it zeroes them too.
			if k := len(out); k > 0 {
				out[k-1].end = off + n
			}
			break
		}
		namesz := uint64(f.order.Uint32(b[at:]))
		descsz := uint64(f.order.Uint32(b[at+4:]))
		typ := f.order.Uint32(b[at+8:])
		nameOff := at + noteHeader
		if namesz > n-nameOff {
			return out, formatErr(int64(off+at), "%s: note name size 0x%x overruns it", what, namesz)
		}
		descOff := alignUp(nameOff+namesz, align)
		if descOff > n || descsz > n-descOff {
			return out, formatErr(int64(off+at), "%s: note descriptor size 0x%x overruns it", what, descsz)
		}
		end := min(alignUp(descOff+descsz, align), n)
		name := strings.TrimRight(string(b[nameOff:nameOff+namesz]), "\x00")
		out = append(out, parsedNote{
			Note: Note{NoteID: NoteID{Owner: name, Type: typ}, Desc: bytes.Clone(b[descOff : descOff+descsz]), Off: int64(off + at)},
			end:  off + end,
		})
		at = end
	}
	return out, nil
}

// parseNotesFallback is parseNotes, except that a container aligned 8
// whose notes do not parse with 8 is read with 4 where that reads it
// whole. Such containers are 4-aligned notes under an 8 that means
// nothing: a PT_NOTE that mixes both (mold: .note.gnu.property, 8, then
// .note.gnu.build-id, 4, under p_align 8) read without section headers,
// or a section whose sh_addralign is 8 over 4-aligned notes (patchelf's
// contiguous-note-sections test; readelf warns and stops there). 8-aligned
// notes with 4-byte names and descriptors read the same with 4.
func (f *File) parseNotesFallback(b []byte, off, align uint64, what string) ([]parsedNote, error) {
	ns, err := f.parseNotes(b, off, align, what)
	if err != nil && align == 8 {
		if ns4, err4 := f.parseNotes(b, off, 4, what); err4 == nil {
			return ns4, nil
		}
	}
	return ns, err
}

// noteAlign is the alignment notes are parsed with in a container of the
// given p_align or sh_addralign.
func noteAlign(a uint64) uint64 {
	if a == 8 {
		return 8
	}
	return 4
}

// allNotes reads every note: those of the PT_NOTE segments (in file order;
// a range two PT_NOTEs cover is read once), then those of SHT_NOTE sections
// no PT_NOTE covers. It stops at the first malformed container and returns
// what it read before with the error.
//
// The result is read once per File (a File's bytes do not change under it):
// Info, Verify and the planner each ask for it, several times per edit.
// Callers only read it (a copy per call would be allocation on every
// caller's hot path); its capacity is its length, so an append copies rather
// than writes into the memo.
func (f *File) allNotes() ([]parsedNote, error) {
	if !f.notes.read {
		f.notes.all, f.notes.err = f.readAllNotes()
		f.notes.read = true
	}
	n := len(f.notes.all)
	return f.notes.all[:n:n], f.notes.err
}

// readAllNotes is allNotes without the memo.
//
// Its work is bounded by the file's size, whatever the headers claim: a
// container (PT_NOTE or SHT_NOTE section) inside bytes already read is not
// read again (65,000 PT_NOTEs over one block of notes read the block once),
// the bytes read in all may not exceed the file's size (containers that
// overlap partly are refused beyond that), and the note sections are
// looked up through one index sorted by offset.
func (f *File) readAllNotes() ([]parsedNote, error) {
	var out []parsedNote
	seen := map[int64]bool{}
	var noteProgs []elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_NOTE && p.Filesz > 0 {
			noteProgs = append(noteProgs, p)
		}
	}
	// By offset, the longest first: a range inside one before it is then
	// inside the last range read.
	slices.SortStableFunc(noteProgs, func(a, b elf.ProgHeader) int {
		if c := cmpU64(a.Off, b.Off); c != 0 {
			return c
		}
		return cmpU64(b.Filesz, a.Filesz)
	})
	secs := f.noteSectionIndex()
	w := noteWalk{budget: uint64(max(f.size, 0))}
	for _, p := range noteProgs {
		if p.Filesz > maxNoteSegment {
			return out, formatErr(int64(p.Off), "PT_NOTE of 0x%x bytes is not plausible", p.Filesz)
		}
		read, err := w.take(p.Off, p.Filesz, "PT_NOTE")
		if err != nil {
			return out, err
		}
		if !read {
			continue
		}
		b, err := readAt(f.r, f.size, p.Off, p.Filesz, "PT_NOTE")
		if err != nil {
			return out, err
		}
		// Linkers put notes of both alignments under one PT_NOTE (mold:
		// .note.gnu.property, 8, then .note.gnu.build-id, 4, under p_align
		// 8). Where section headers say where each section starts and how
		// it is aligned, the notes are read section by section.
		type part struct{ lo, hi, align uint64 }
		var parts []part
		for _, i := range secs.from(p.Off, p.Off+p.Filesz) {
			s := f.Sections[i]
			if s.Size <= p.Filesz && s.Offset-p.Off <= p.Filesz-s.Size {
				parts = append(parts, part{s.Offset - p.Off, s.Offset - p.Off + s.Size, noteAlign(s.Addralign)})
			}
		}
		slices.SortFunc(parts, func(a, b part) int { return cmpU64(a.lo, b.lo) })
		// The loaders read the whole segment: bytes no note section
		// describes (a note written without a section header, or one
		// whose header is gone) are read with the segment's alignment.
		// Gaps shorter than a note header are padding.
		var gaps []part
		at := uint64(0)
		for _, pt := range parts {
			if pt.lo >= at+noteHeader {
				gaps = append(gaps, part{at, pt.lo, noteAlign(p.Align)})
			}
			at = max(at, pt.hi)
		}
		if p.Filesz >= at+noteHeader {
			gaps = append(gaps, part{at, p.Filesz, noteAlign(p.Align)})
		}
		parts = append(parts, gaps...)
		slices.SortFunc(parts, func(a, b part) int { return cmpU64(a.lo, b.lo) })
		for _, pt := range parts {
			ns, err := f.parseNotesFallback(b[pt.lo:pt.hi], p.Off+pt.lo, pt.align, "PT_NOTE")
			for _, n := range ns {
				if seen[n.Off] {
					continue
				}
				seen[n.Off] = true
				n.Loaded = true
				if i := secs.at(uint64(n.Off)); i >= 0 {
					n.Section = f.Sections[i].Name
				}
				out = append(out, n)
			}
			if err != nil {
				return out, err
			}
		}
	}
	covered := func(lo, hi uint64) bool { return inOneNote(noteProgs, lo, hi) }
	var ss []Section
	for _, i := range secs.order {
		if s := f.Sections[i]; !covered(s.Offset, s.Offset+s.Size) {
			ss = append(ss, s)
		}
	}
	for _, s := range ss {
		if s.Size > maxNoteSegment {
			return out, formatErr(int64(s.Offset), "note section %s of 0x%x bytes is not plausible", s.Name, s.Size)
		}
		read, err := w.take(s.Offset, s.Size, "note section "+s.Name)
		if err != nil {
			return out, err
		}
		if !read {
			continue
		}
		b, err := readAt(f.r, f.size, s.Offset, s.Size, "note section "+s.Name)
		if err != nil {
			return out, err
		}
		ns, err := f.parseNotesFallback(b, s.Offset, noteAlign(s.Addralign), "note section "+s.Name)
		for _, n := range ns {
			if seen[n.Off] {
				continue
			}
			seen[n.Off] = true
			n.Section = s.Name
			out = append(out, n)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// inOneNote reports whether one of progs (sorted by offset, the longest
// first) holds [lo, hi), looking at the maxNoteProbe nearest that start
// at or before lo.
func inOneNote(progs []elf.ProgHeader, lo, hi uint64) bool {
	i, _ := slices.BinarySearchFunc(progs, lo, func(p elf.ProgHeader, v uint64) int {
		if p.Off <= v {
			return -1
		}
		return 1
	})
	// progs[:i] start at or before lo; files have a handful, the nearest
	// are looked at.
	for j := i - 1; j >= 0 && j >= i-maxNoteProbe; j-- {
		if p := progs[j]; hi-p.Off <= p.Filesz {
			return true
		}
	}
	return false
}

// maxNoteProbe bounds the PT_NOTEs inOneNote looks back over: files
// have a handful; a hostile one with thousands gets a bounded answer.
const maxNoteProbe = 64

// noteWalk keeps the file ranges the note walk has read, merged, and the
// bytes it may still read.
type noteWalk struct {
	read   []rng // sorted, disjoint
	budget uint64
}

// take says whether [off, off+n) must be read: not when a range already
// read holds it. A range that must be read is charged to the budget; one
// that exceeds it is an error (containers that overlap partly, each
// rereading what the one before read).
func (w *noteWalk) take(off, n uint64, what string) (bool, error) {
	r := rng{off, off + n}
	i, _ := slices.BinarySearchFunc(w.read, off, func(x rng, v uint64) int {
		if x.hi <= v {
			return -1
		}
		return 1
	})
	if i < len(w.read) && w.read[i].lo <= r.lo && r.hi <= w.read[i].hi {
		return false, nil
	}
	if n > w.budget {
		return false, formatErr(int64(off), "%s (0x%x bytes) overlaps notes already read: the note containers read more than the file holds", what, n)
	}
	w.budget -= n
	// Merge r into the sorted, disjoint list.
	j := i
	for j < len(w.read) && w.read[j].lo <= r.hi {
		r.lo, r.hi = min(r.lo, w.read[j].lo), max(r.hi, w.read[j].hi)
		j++
	}
	w.read = slices.Replace(w.read, i, j, r)
	return true, nil
}

// noteSections indexes the non-empty SHT_NOTE sections by offset.
type noteSections struct {
	f     *File
	order []int // section indices, by offset (then index); one per offset
}

// noteSectionIndex builds the index. Of sections that start at the same
// offset only the first is kept: files have one note section per offset,
// and a hostile one with thousands must not make each lookup scan them.
func (f *File) noteSectionIndex() noteSections {
	var order []int
	for i, s := range f.Sections {
		if s.Type == elf.SHT_NOTE && s.Size > 0 && s.Offset+s.Size >= s.Offset {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpU64(f.Sections[a].Offset, f.Sections[b].Offset) })
	order = slices.CompactFunc(order, func(a, b int) bool { return f.Sections[a].Offset == f.Sections[b].Offset })
	return noteSections{f: f, order: order}
}

// from returns the sections that start in [lo, hi).
func (x noteSections) from(lo, hi uint64) []int {
	i, _ := slices.BinarySearchFunc(x.order, lo, func(k int, v uint64) int { return cmpU64(x.f.Sections[k].Offset, v) })
	j := i
	for j < len(x.order) && x.f.Sections[x.order[j]].Offset < hi {
		j++
	}
	return x.order[i:j]
}

// at returns the section holding offset off: the last one starting at or
// before it, if it reaches it; -1 if none. Note sections do not overlap
// (Verify's section-note); where they do, the nearest start wins.
func (x noteSections) at(off uint64) int {
	i, _ := slices.BinarySearchFunc(x.order, off, func(k int, v uint64) int {
		if x.f.Sections[k].Offset <= v {
			return -1
		}
		return 1
	})
	if i == 0 {
		return -1
	}
	s := x.f.Sections[x.order[i-1]]
	if off-s.Offset < s.Size {
		return x.order[i-1]
	}
	return -1
}

// noteSection is the index of the SHT_NOTE section holding the note at
// [lo, hi), -1 if none.
func (f *File) noteSection(lo, _ uint64) int {
	for i, s := range f.Sections {
		if s.Type == elf.SHT_NOTE && lo >= s.Offset && lo-s.Offset < s.Size {
			return i
		}
	}
	return -1
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Notes returns every note of the file: those of the PT_NOTE segments (what
// the loaders see, Loaded set), then those of SHT_NOTE sections that no
// PT_NOTE covers, each in file order. A malformed note (a size that runs
// past its segment) is an error naming its offset; the notes read before
// it are returned with it.
func (f *File) Notes() ([]Note, error) {
	ps, err := f.allNotes()
	out := make([]Note, len(ps))
	for i, p := range ps {
		out[i] = p.Note
	}
	return out, err
}

// Note returns the first note with the given id, and whether there is one.
func (f *File) Note(id NoteID) (*Note, bool, error) {
	ns, err := f.Notes()
	for i := range ns {
		if ns[i].NoteID == id {
			return &ns[i], true, err
		}
	}
	return nil, false, err
}

// noteChanges is what an edit does to the notes.
type noteChanges struct {
	all    []parsedNote // every note of the file
	remove []parsedNote // notes that go (removed, replaced or stale)
	set    *Note        // the note to write, nil if none
}

func (c *noteChanges) any() bool { return c != nil && (c.set != nil || len(c.remove) > 0) }

// planNotes decides which notes an edit removes and whether SetNote must be
// written. derived reports that the edit changes DT_NEEDED, the search path
// or the interpreter, which makes the Derived notes stale.
func (f *File) planNotes(e *Edit, derived bool) (*noteChanges, error) {
	if e.SetNote == nil && len(e.RemoveNotes) == 0 && (len(e.Derived) == 0 || !derived) {
		return nil, nil
	}
	all, err := f.allNotes()
	if err != nil {
		return nil, err
	}
	c := &noteChanges{all: all}
	gone := slices.Clone(e.RemoveNotes)
	if derived {
		gone = append(gone, e.Derived...)
	}
	if n := e.SetNote; n != nil {
		var same []parsedNote
		for _, o := range all {
			if o.NoteID == n.NoteID {
				same = append(same, o)
			}
		}
		fresh := len(same) == 1 && same[0].Loaded && bytes.Equal(same[0].Desc, n.Desc) &&
			(same[0].Section == n.Section || len(f.Sections) == 0)
		if !fresh {
			w := *n
			w.Desc = bytes.Clone(n.Desc)
			w.Loaded, w.Off = true, 0
			if len(f.Sections) == 0 {
				w.Section = ""
			}
			c.set = &w
			gone = append(gone, n.NoteID)
		} else {
			// A fresh note of the same id stays, whatever Derived says.
			gone = slices.DeleteFunc(gone, func(id NoteID) bool { return id == n.NoteID })
		}
	}
	for _, o := range all {
		if slices.Contains(gone, o.NoteID) {
			c.remove = append(c.remove, o)
		}
	}
	// Only an edit that writes or removes a note rebuilds the note
	// headers. One that merely names derived notes the file does not
	// have (patchelf --set-interpreter names the resolution cache) leaves
	// them as they are, agreeing or not: patchelf's
	// contiguous-note-sections test, whose build-id note lies under
	// PT_INTERP and in no PT_NOTE, was refused for a new interpreter.
	if c.any() {
		if err := f.noteHeadersDisagree(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// derivedChanged reports whether the planned dynamic entries or interpreter
// change what a resolution cache is computed from: the DT_NEEDED names in
// order, DT_RUNPATH and DT_RPATH (tag and value), the interpreter.
func (f *File) derivedChanged(ents []dent, interp string) bool {
	if interp != f.Interp {
		return true
	}
	type kv struct {
		tag elf.DynTag
		s   string
	}
	var before, after []kv
	for _, d := range f.Dynamic[:max(f.dynLen, 0)] {
		if d.Tag == elf.DT_NEEDED || d.Tag == elf.DT_RUNPATH || d.Tag == elf.DT_RPATH {
			s, _ := cstring(f.strtab, d.Val)
			before = append(before, kv{d.Tag, s})
		}
	}
	for _, d := range ents {
		if d.tag == elf.DT_NEEDED || d.tag == elf.DT_RUNPATH || d.tag == elf.DT_RPATH {
			after = append(after, kv{d.tag, d.str})
		}
	}
	return !slices.Equal(before, after)
}
