package elfedit

import (
	"bytes"
	"debug/elf"
	"fmt"
	"slices"
)

// A note edit changes headers only, plus at most one region. A note that
// goes leaves every PT_NOTE that covers it (which shrinks, splits around
// it, or goes with a PT_LOAD that maps only it: patchelf's layout) and
// its SHT_NOTE header (which goes, renumbering the later ones, or
// shrinks), and its bytes are zeroed after the commit. A note that is
// written goes into the region's note area, under one PT_NOTE, with a
// section header added at the end of the table (its name in a copy of
// .shstrtab) or reused. The commit is the program header table's write,
// as for any other edit.

// areaNote is one note of the region's note area.
type areaNote struct {
	b   []byte
	sec int // index in noteEdit.secs of its section header, -1 if none
}

// noteEdit is what a note change does to the headers, in the coordinates
// of the original file (the region layout relocates what it moves).
type noteEdit struct {
	progs []elf.ProgHeader
	// secs are the section headers after the change; orig[j] is the old
	// index of secs[j] (-1 for a new one) and secMap[i] the new index of
	// old section i (-1 if it went).
	secs   []Section
	orig   []int
	secMap []int
	// count says the number of sections changed: the table must move
	// (it cannot shrink or grow in place in one write with e_shnum).
	count    bool
	shstrndx int
	// shstr is a grown copy of the section name table, nil if unchanged.
	shstr []byte
	area  []areaNote
	// zero are the old bytes of removed notes, zeroed after the commit.
	zero []rng
}

// editNotes computes the headers after the note change. In region mode
// the notes of the live region's note area are rebuilt in the new region
// (their PT_NOTE goes and area lists the kept ones); otherwise they are
// treated as any other note.
func (f *File) editNotes(c *noteChanges, region bool) (*noteEdit, error) {
	// Sized up front: a plan makes these for every file it edits.
	ne := &noteEdit{shstrndx: f.Header.Shstrndx,
		secs: make([]Section, 0, len(f.Sections)+1), orig: make([]int, 0, len(f.Sections)+1)}
	sc := newNoteScope(f, c, region)
	ne.progs = sc.progs()
	reuse, err := sc.sections(ne)
	if err != nil {
		return nil, err
	}
	if err := sc.area(ne, reuse); err != nil {
		return nil, err
	}
	if ne.count {
		if err := ne.renumber(f); err != nil {
			return nil, err
		}
	}
	for _, n := range c.remove {
		if !(n.Loaded && sc.inArea(uint64(n.Off))) {
			ne.zero = append(ne.zero, rng{uint64(n.Off), n.end})
		}
	}
	return ne, nil
}

// noteScope is what editNotes' steps share: the change, the notes that
// go (by offset), and the live region's note area when it is rebuilt
// (empty otherwise).
type noteScope struct {
	f              *File
	c              *noteChanges
	gone           map[int64]bool
	areaLo, areaHi uint64
}

func newNoteScope(f *File, c *noteChanges, region bool) *noteScope {
	sc := &noteScope{f: f, c: c, gone: map[int64]bool{}}
	for _, n := range c.remove {
		sc.gone[n.Off] = true
	}
	// The live region's note area: after its header and carried bytes.
	if live := f.region; region && live != nil {
		lp := f.Progs[live.prog]
		sc.areaLo, sc.areaHi = live.carryOff+live.carry, lp.Off+lp.Filesz
	}
	return sc
}

func (sc *noteScope) inArea(off uint64) bool { return off >= sc.areaLo && off < sc.areaHi }

// loaded are the loaded notes that start in [lo, hi).
func (sc *noteScope) loaded(lo, hi uint64) []parsedNote {
	var out []parsedNote
	for _, n := range sc.c.all {
		if n.Loaded && uint64(n.Off) >= lo && uint64(n.Off) < hi {
			out = append(out, n)
		}
	}
	return out
}

// progs are the program headers after the change: each PT_NOTE that
// covers a note that goes shrinks or splits around it, or goes with a
// PT_LOAD that maps nothing else; a PT_GNU_PROPERTY of a note that goes
// goes; the PT_NOTE of the live area goes (the region rebuilds it).
func (sc *noteScope) progs() []elf.ProgHeader {
	f, live := sc.f, sc.f.region
	dropLoad := map[int]bool{}
	progs := make([]elf.ProgHeader, 0, len(f.Progs)+1)
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz == 0 {
			progs = append(progs, p)
			continue
		}
		if sc.inArea(p.Off) {
			continue // rebuilt by the region
		}
		if p.Off < sc.areaLo && p.Off+p.Filesz > sc.areaLo && sc.areaHi > sc.areaLo {
			// A PT_NOTE extended over the area ends where the area
			// begins; the region layout extends it again.
			p.Filesz, p.Memsz = sc.areaLo-p.Off, sc.areaLo-p.Off
		}
		end := p.Off + p.Filesz
		ns := sc.loaded(p.Off, end)
		if !slices.ContainsFunc(ns, func(n parsedNote) bool { return sc.gone[n.Off] }) {
			progs = append(progs, p)
			continue
		}
		runs := keptRuns(ns, sc.gone, end)
		progs = append(progs, splitNote(p, runs)...)
		if len(runs) == 0 {
			// A PT_LOAD that maps nothing but this PT_NOTE's bytes goes
			// with it (patchelf master's layout).
			for j, l := range f.Progs {
				if l.Type == elf.PT_LOAD && l.Filesz > 0 && l.Filesz == l.Memsz && l.Off >= p.Off && l.Off+l.Filesz <= alignUp(end, 4) &&
					(live == nil || j != live.prog) {
					dropLoad[j] = true
				}
			}
		}
	}
	progs = slices.DeleteFunc(progs, func(p elf.ProgHeader) bool {
		if p.Type != elf.PT_GNU_PROPERTY || p.Filesz == 0 {
			return false
		}
		return slices.ContainsFunc(sc.c.remove, func(n parsedNote) bool { return p.Off >= uint64(n.Off) && p.Off+p.Filesz <= n.end })
	})
	if len(dropLoad) == 0 {
		return progs
	}
	var keep []elf.ProgHeader
	for _, p := range progs {
		drop := false
		for j := range dropLoad {
			if p == f.Progs[j] {
				drop = true
			}
		}
		if !drop {
			keep = append(keep, p)
		}
	}
	return keep
}

// keptRuns are the runs of adjacent notes of ns that stay, each cut at
// end.
func keptRuns(ns []parsedNote, gone map[int64]bool, end uint64) []rng {
	var runs []rng
	for _, n := range ns {
		if gone[n.Off] {
			continue
		}
		lo, hi := uint64(n.Off), min(n.end, end)
		if k := len(runs); k > 0 && runs[k-1].hi == lo {
			runs[k-1].hi = hi
			continue
		}
		runs = append(runs, rng{lo, hi})
	}
	return runs
}

// splitNote is PT_NOTE p cut to runs, one PT_NOTE each (4-aligned where
// its own alignment no longer holds).
func splitNote(p elf.ProgHeader, runs []rng) []elf.ProgHeader {
	var out []elf.ProgHeader
	for _, r := range runs {
		q := p
		d := r.lo - p.Off
		q.Off, q.Vaddr, q.Paddr = r.lo, p.Vaddr+d, p.Paddr+d
		q.Filesz, q.Memsz = r.hi-r.lo, r.hi-r.lo
		if q.Align > 4 && q.Off%q.Align != 0 {
			q.Align = 4
		}
		out = append(out, q)
	}
	return out
}

// sections fills ne's section headers: a SHT_NOTE whose notes all go
// goes (or is reused for the note set, when it has its name), one that
// keeps some shrinks to them. It returns the old index of the reused
// header, -1 for none.
func (sc *noteScope) sections(ne *noteEdit) (reuse int, err error) {
	f, set := sc.f, sc.c.set
	secNotes := map[int][]parsedNote{}
	for _, n := range sc.c.all {
		if i := f.noteSection(uint64(n.Off), n.end); i >= 0 {
			secNotes[i] = append(secNotes[i], n)
		}
	}
	reuse = -1
	ne.secMap = make([]int, len(f.Sections))
	keep := func(i int, s Section) {
		ne.secMap[i] = len(ne.secs)
		ne.secs = append(ne.secs, s)
		ne.orig = append(ne.orig, i)
	}
	for i, s := range f.Sections {
		ns := secNotes[i]
		if s.Type != elf.SHT_NOTE || !slices.ContainsFunc(ns, func(n parsedNote) bool { return sc.gone[n.Off] }) {
			keep(i, s)
			continue
		}
		var kept []parsedNote
		for _, n := range ns {
			if !sc.gone[n.Off] {
				kept = append(kept, n)
			}
		}
		if len(kept) == 0 {
			if set != nil && set.Section != "" && s.Name == set.Section && reuse < 0 {
				reuse = i
				keep(i, s)
				continue
			}
			ne.secMap[i] = -1
			ne.count = true
			continue
		}
		lo, hi := uint64(kept[0].Off), min(kept[len(kept)-1].end, s.Offset+s.Size)
		for _, n := range ns {
			if sc.gone[n.Off] && uint64(n.Off) > lo && uint64(n.Off) < hi {
				return -1, formatErr(n.Off, "note %q type 0x%x lies between other notes of section %s: cannot remove it", n.Owner, n.Type, s.Name)
			}
		}
		if s.Flags&elf.SHF_ALLOC != 0 {
			s.Addr += lo - s.Offset
		}
		s.Offset, s.Size = lo, hi-lo
		keep(i, s)
	}
	return reuse, nil
}

// area fills the region's note area: the live area's kept notes, with
// their section headers, then the note set, in the reused header or one
// added at the end (its name added to a copy of the name table).
func (sc *noteScope) area(ne *noteEdit, reuse int) error {
	f, set := sc.f, sc.c.set
	var areaSecs []int // old section index of each area note, -1
	for _, n := range sc.loaded(sc.areaLo, sc.areaHi) {
		if sc.gone[n.Off] {
			continue
		}
		si := f.noteSection(uint64(n.Off), n.end)
		if si >= 0 && ne.secMap[si] < 0 {
			si = -1
		}
		nn := n.Note
		ne.area = append(ne.area, areaNote{b: f.encodeNote(&nn), sec: -1})
		areaSecs = append(areaSecs, si)
	}
	if set != nil {
		ne.area = append(ne.area, areaNote{b: f.encodeNote(set), sec: -1})
		areaSecs = append(areaSecs, reuse)
	}
	for a, si := range areaSecs {
		if si >= 0 {
			ne.area[a].sec = ne.secMap[si]
		}
	}
	if set == nil || set.Section == "" || len(f.Sections) == 0 || reuse >= 0 {
		return nil
	}
	off, grown, err := f.sectionName(set.Section)
	if err != nil {
		return err
	}
	ne.shstr = grown
	ne.area[len(ne.area)-1].sec = len(ne.secs)
	ne.secs = append(ne.secs, Section{Name: set.Section, NameOff: off, Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Addralign: 4})
	ne.orig = append(ne.orig, -1)
	ne.count = true
	return nil
}

// renumber points every section index the file holds at the new numbering:
// sh_link, sh_info where it names a section, e_shstrndx. (Symbol tables
// are renumbered by fixSymbols.)
func (ne *noteEdit) renumber(f *File) error {
	h := f.Header
	if h.Shnum >= int(elf.SHN_LORESERVE) || h.Shstrndx >= int(elf.SHN_LORESERVE) || len(f.rawEhdr) > 0 && f.rawShnum() == 0 {
		return formatErr(int64(h.Shoff), "extended section numbering: cannot add or remove a section header")
	}
	for _, s := range f.Sections {
		if s.Type == elf.SHT_SYMTAB_SHNDX || s.Type == elf.SHT_GROUP {
			return formatErr(int64(s.Offset), "section %s holds section indices: cannot add or remove a section header", s.Name)
		}
	}
	// A link past the table would name whichever section comes to have
	// that index once the count changes.
	for i, s := range f.Sections {
		linksInfo := s.Flags&elf.SHF_INFO_LINK != 0 || s.Type == elf.SHT_REL || s.Type == elf.SHT_RELA
		if int(s.Link) >= len(f.Sections) || linksInfo && int(s.Info) >= len(f.Sections) {
			return formatErr(int64(h.Shoff), "section %d %s links to a section that does not exist: cannot add or remove a section header", i, s.Name)
		}
	}
	remap := func(i uint32) uint32 {
		if int(i) < len(ne.secMap) {
			if j := ne.secMap[i]; j >= 0 {
				return uint32(j)
			}
			return 0
		}
		return i
	}
	for j := range ne.secs {
		s := &ne.secs[j]
		if ne.orig[j] < 0 {
			continue
		}
		s.Link = remap(s.Link)
		if s.Flags&elf.SHF_INFO_LINK != 0 || s.Type == elf.SHT_REL || s.Type == elf.SHT_RELA {
			s.Info = remap(s.Info)
		}
	}
	if h.Shstrndx > 0 && h.Shstrndx < len(ne.secMap) {
		if ne.secMap[h.Shstrndx] < 0 {
			return formatErr(int64(h.Shoff), "the section name table is a note section: cannot remove it")
		}
		ne.shstrndx = ne.secMap[h.Shstrndx]
	}
	return nil
}

// rawShnum is e_shnum as the header holds it (0 with extended numbering).
func (f *File) rawShnum() int {
	if f.Header.Class == elf.ELFCLASS64 {
		return int(f.order.Uint16(f.rawEhdr[60:]))
	}
	return int(f.order.Uint16(f.rawEhdr[48:]))
}

// sectionName returns the offset of name in the section name table, and a
// grown copy of the table when it had to be added (nil otherwise).
func (f *File) sectionName(name string) (uint32, []byte, error) {
	h := f.Header
	if h.Shstrndx <= 0 || h.Shstrndx >= len(f.Sections) || f.Sections[h.Shstrndx].Type != elf.SHT_STRTAB {
		return 0, nil, formatErr(int64(h.Shoff), "no section name table to name a new section in")
	}
	s := f.Sections[h.Shstrndx]
	if s.Size > maxNoteSegment {
		return 0, nil, formatErr(int64(s.Offset), "section name table of 0x%x bytes is not plausible", s.Size)
	}
	tab, err := readAt(f.r, f.size, s.Offset, s.Size, "section name table")
	if err != nil {
		return 0, nil, err
	}
	want := append([]byte(name), 0)
	if i := bytes.Index(tab, want); i >= 0 {
		return uint32(i), nil, nil
	}
	if f.namesInDynstr() {
		return 0, nil, formatErr(int64(s.Offset), "the section names are in the dynamic string table: cannot add one")
	}
	if len(tab) > 0 && tab[len(tab)-1] != 0 {
		// The last name has no NUL: whatever is appended (a NUL of our
		// own, or the new name) would become part of it.
		return 0, nil, formatErr(int64(s.Offset), "the section name table does not end in a NUL: a name added to it would change the last one")
	}
	grown := slices.Clone(tab)
	off := len(grown)
	grown = append(grown, want...)
	if uint64(len(grown)) > 1<<32-1 {
		return 0, nil, fmt.Errorf("section name table too large")
	}
	return uint32(off), grown, nil
}

// tableOnly plans a note removal that only rewrites headers in place: the
// program header table (the commit) and section headers that shrink. It
// is taken when nothing else changes, no section header goes or comes,
// and the program header table does not grow and lives where it did.
func (b *builder) tableOnly(ne *noteEdit) (*Plan, bool) {
	f := b.f
	h := f.Header
	if b.notes.set != nil || b.dynChanged || b.interpChanged || ne.count || len(ne.progs) > h.Phnum ||
		f.region != nil && f.region.phdrIn || h.Phoff < uint64(len(f.rawEhdr)) {
		return nil, false
	}
	ps := uint64(f.phdrSize())
	oldTbl := rng{h.Phoff, h.Phoff + uint64(h.Phnum)*ps}
	for _, z := range ne.zero {
		if z.overlaps(oldTbl) || z.lo < uint64(len(f.rawEhdr)) {
			return nil, false
		}
	}
	if len(f.Sections) > 0 {
		sht := make([]byte, len(ne.secs)*int(f.shdrSize()))
		for j, s := range ne.secs {
			copy(sht[j*int(f.shdrSize()):], f.encodeSection(s))
		}
		old, err := readAt(f.r, f.size, h.Shoff, uint64(len(sht)), "section header table")
		if err != nil {
			return nil, false
		}
		if lo, data, ok := diffRange(old, sht); ok {
			b.add(StepNeutral, "section headers of the remaining notes", h.Shoff+uint64(lo), data)
		}
	}
	head, err := readAt(f.r, f.size, 0, h.Phoff, "bytes before the program header table")
	if err != nil {
		return nil, false
	}
	f.putEhdr(head, h.Phoff, len(ne.progs), h.Shoff)
	tbl := make([]byte, oldTbl.hi-oldTbl.lo) // a shrunk table is followed by zeros
	for i, p := range ne.progs {
		if p.Type == elf.PT_PHDR {
			p.Filesz, p.Memsz = uint64(len(ne.progs))*ps, uint64(len(ne.progs))*ps
		}
		f.encodeProg(tbl[uint64(i)*ps:], p)
	}
	b.add(StepCommit, "ELF header and program header table", 0, append(head, tbl...))
	for _, z := range ne.zero {
		b.add(StepHygiene, "zero the removed note", z.lo, make([]byte, z.hi-z.lo))
	}
	return b.finish(InPlace, f.size), true
}
