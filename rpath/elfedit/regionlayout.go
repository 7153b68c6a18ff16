package elfedit

import (
	"debug/elf"
	"slices"
)

// regionLayout is what a region holds, relative to its start, and where
// it goes: everything layRegion decides before it writes anything.
type regionLayout struct {
	phdrIn bool // the program header table moves into the region

	// The program headers: the file's (or a note edit's), with the
	// region's PT_LOAD at loadAt and the note area's PT_NOTE at noteAt
	// (-1 for none; adopted when an existing PT_NOTE is extended over it).
	progs           []elf.ProgHeader
	loadAt, noteAt  int
	adopted         bool
	secs            []Section // the section headers (a note edit's when there is one)
	orig            []int     // the file's index of each of secs, -1 for a new one
	shstrndx        int
	phRel, phSize   uint64
	carryRel        uint64 // where the carried bytes start
	blobs           []blob
	copyRel         []uint64 // where builder.copies go
	carryEnd        uint64
	noteRel         uint64
	noteSize        uint64
	areaOff         []uint64 // each note area piece's offset in the note area
	remapped        bool     // an address of .dynamic points into a moved blob
	moveInterp      bool
	moveDyn         bool
	moveStr         bool
	moveSht         bool
	interpRel       uint64
	dynRel, strRel  uint64
	dynSlots        int
	segSize         uint64 // the loaded part
	shstr           []byte // the copied section name table, nil for none
	shstrRel, shRel uint64
	total           uint64 // with the unloaded tail

	off, vaddr uint64 // where the region goes
	atEnd      bool   // the live region ends the file

	strAddr, strSize uint64 // the string table .dynamic gives
}

// reloc is where file offset o lands in the region, if a blob moves it.
func (L *regionLayout) reloc(o uint64) (uint64, bool) {
	for _, bl := range L.blobs {
		if o >= bl.lo && o < bl.hi {
			return bl.rel + (o - bl.lo), true
		}
	}
	return 0, false
}

// blobAddr is where the bytes at address addr land in the region, if a
// blob moves them.
func (L *regionLayout) blobAddr(f *File, addr uint64) (uint64, bool) {
	o, ok := f.vaddrToOff(addr, 0)
	if !ok {
		return 0, false
	}
	return L.reloc(o)
}

// decideRegion lays the region out, with or without the program header
// table in it. ok is false when that layout cannot be used (the table
// cannot grow in place, or a self-relocating file would need its tables
// moved) and the other should be tried.
func (b *builder) decideRegion(phdrIn bool) (L *regionLayout, ok bool, err error) {
	L = b.startLayout(phdrIn)
	if !b.layoutCarried(L) {
		return nil, false, nil
	}
	b.layoutCopiesAndNotes(L)
	if err := b.checkPointers(b.f.region, func(a uint64) (uint64, bool) { return L.blobAddr(b.f, a) }); err != nil {
		return nil, false, err
	}
	for _, d := range b.ents {
		if _, ok := L.blobAddr(b.f, d.val); ok && addrTags[d.tag] {
			L.remapped = true
		}
	}
	if L.remapped && !phdrIn && b.f.selfRelocating() {
		// A static PIE or ld.so relocates itself through _DYNAMIC, a
		// link-time address: its .dynamic, and the tables it points to,
		// must stay where they are. The table moves instead.
		return nil, false, nil
	}
	b.layoutTables(L)
	if err := b.layoutTail(L); err != nil {
		return nil, false, err
	}
	if err := b.placeRegion(L); err != nil {
		return nil, false, err
	}
	b.relocateProgs(L)
	b.repointDynamic(L)
	return L, true, nil
}

// startLayout takes the program and section headers to edit (the file's,
// or those a note edit laid out) and adds the region's PT_LOAD after the
// last one, unless the live region's is reused.
func (b *builder) startLayout(phdrIn bool) *regionLayout {
	f := b.f
	L := &regionLayout{phdrIn: phdrIn, noteAt: -1, progs: slices.Clone(f.Progs), secs: f.Sections, orig: make([]int, len(f.Sections)), shstrndx: f.Header.Shstrndx}
	for i := range L.orig {
		L.orig[i] = i
	}
	if ne := b.ne; ne != nil {
		L.progs, L.secs, L.orig, L.shstrndx = slices.Clone(ne.progs), ne.secs, ne.orig, ne.shstrndx
	}
	if live := f.region; live != nil {
		lp := f.Progs[live.prog]
		L.loadAt = slices.IndexFunc(L.progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_LOAD && p.Off == lp.Off })
		return L
	}
	last := -1
	for i, p := range L.progs {
		if p.Type == elf.PT_LOAD {
			last = i
		}
	}
	L.loadAt = last + 1
	L.progs = slices.Insert(L.progs, L.loadAt, elf.ProgHeader{Type: elf.PT_LOAD})
	return L
}

// layoutCarried decides the carried bytes (what the live region carries,
// then what moves out of the way of a grown program header table) and
// the note area's PT_NOTE: a 4-aligned PT_NOTE that ends exactly where
// the carried bytes do (moved with them) is extended over the area, one
// program header less to make room for (static executables have
// code-referenced relocations right after their notes). It reports
// false when the table cannot grow in place.
func (b *builder) layoutCarried(L *regionLayout) bool {
	var rel uint64
	var ok bool
	if b.ne != nil && len(b.ne.area) > 0 {
		if rel, ok = b.carried(L, len(L.progs)); ok && rel%4 == 0 && len(b.copies) == 0 {
			if i := adoptableNote(L.progs, L.blobs, rel); i >= 0 {
				L.noteAt, L.adopted = i, true
			}
		}
		if !L.adopted {
			L.noteAt = len(L.progs)
			L.progs = append(L.progs, elf.ProgHeader{Type: elf.PT_NOTE, Flags: elf.PF_R, Align: 4})
		}
	}
	if !L.adopted {
		if rel, ok = b.carried(L, len(L.progs)); !ok {
			return false
		}
	}
	L.carryEnd = rel
	return true
}

// carried sets L's carried blobs for a program header table of n entries
// and returns where they end.
func (b *builder) carried(L *regionLayout, n int) (uint64, bool) {
	f, live := b.f, b.f.region
	rel := uint64(regionHeader)
	if L.phdrIn {
		rel += uint64(n) * uint64(f.phdrSize())
	}
	L.carryRel, L.blobs, L.moveSht = rel, nil, false
	var carry blob
	if live != nil {
		carry = blob{lo: live.carryOff, hi: live.carryOff + live.carry}
	}
	var gap []blob
	if k := n - f.Header.Phnum; k > 0 && !L.phdrIn {
		var ok bool
		if gap, L.moveSht, ok = f.gapBlobs(k); !ok || blobBytes(gap) > maxBlobMove {
			L.moveSht = false
			return 0, false
		}
	}
	var end uint64
	L.blobs, end = packBlobs(rel, carry, gap)
	return end, true
}

// packBlobs places the live region's carried bytes (carry, none when
// empty) at rel, then each blob of gap 16-aligned modulo its old offset
// (so that the alignment of what it holds survives). It returns the
// blobs and where they end.
func packBlobs(rel uint64, carry blob, gap []blob) ([]blob, uint64) {
	var out []blob
	if carry.hi > carry.lo {
		carry.rel = rel
		out = append(out, carry)
		rel += carry.hi - carry.lo
	}
	for _, bl := range gap {
		rel = alignUp(rel, 16) + bl.lo%16
		bl.rel = rel
		rel += bl.hi - bl.lo
		out = append(out, bl)
	}
	return out, rel
}

// adoptableNote is the index of the last 4-aligned PT_NOTE of progs that
// a blob moves to end exactly at end, -1 if none.
func adoptableNote(progs []elf.ProgHeader, blobs []blob, end uint64) int {
	at := -1
	for i, p := range progs {
		if p.Type != elf.PT_NOTE || p.Align != 4 || p.Filesz == 0 || p.Filesz%4 != 0 {
			continue
		}
		for _, bl := range blobs {
			if p.Off >= bl.lo && p.Off < bl.hi && bl.rel+(p.Off-bl.lo)+p.Filesz == end {
				at = i
			}
		}
	}
	return at
}

// layoutCopiesAndNotes places the rewritten tables after the carried
// bytes (they are carried bytes too: a later edit carries them into its
// region), then the note area.
func (b *builder) layoutCopiesAndNotes(L *regionLayout) {
	rel := L.carryEnd
	for _, c := range b.copies {
		rel = alignUp(rel, 8)
		L.copyRel = append(L.copyRel, rel)
		rel += uint64(len(c.data))
	}
	L.phSize = uint64(len(L.progs)) * uint64(b.f.phdrSize())
	if L.phdrIn {
		L.phRel = regionHeader
	}
	L.carryEnd = rel
	if L.noteAt >= 0 {
		L.noteRel = alignUp(rel, 4)
		for _, a := range b.ne.area {
			L.areaOff = append(L.areaOff, L.noteSize)
			L.noteSize += uint64(len(a.b))
		}
	}
}

// noteEnd is where the note area ends (the carried bytes' end without one).
func (L *regionLayout) noteEnd() uint64 {
	if L.noteAt >= 0 {
		return L.noteRel + L.noteSize
	}
	return L.carryEnd
}

// layoutTables decides which of .interp, .dynamic and .dynstr move into
// the region and places them after the note area.
func (b *builder) layoutTables(L *regionLayout) {
	f, live := b.f, b.f.region
	L.moveStr = b.dynChanged && (b.sl.grown || len(b.sl.overwrites)+len(b.sl.scrub) > 0) || live.contains(f.strOff)
	// A string table that starts in a moved blob but runs past it (its
	// section header says less than DT_STRSZ) is copied whole instead.
	if r, ok := L.blobAddr(f, f.strAddr); ok {
		if r2, whole := L.blobAddr(f, f.strAddr+uint64(len(f.strtab))-1); !whole || len(f.strtab) == 0 || r2-r != uint64(len(f.strtab))-1 {
			L.moveStr = true
		}
	}
	L.moveDyn = b.dynChanged || L.moveStr || L.remapped || len(b.copies) > 0 || (f.dynProg >= 0 && live.contains(f.Progs[f.dynProg].Off))
	L.moveInterp = b.interpChanged || (f.interpProg >= 0 && live.contains(f.Progs[f.interpProg].Off))
	L.dynSlots = len(f.Dynamic)
	if L.moveDyn {
		L.dynSlots = len(b.ents) + 1 + spareDynSlots
	}
	L.interpRel, L.dynRel, L.strRel, L.segSize = stackTables(L.noteEnd(), uint64(len(b.interp))+1, uint64(L.dynSlots)*f.dynSize(), f.dynSize(), b.sl.size(), L.moveInterp, L.moveDyn, L.moveStr)
}

// stackTables places the tables that move one after the other from rel:
// the interpreter's string (interpLen bytes), .dynamic (dynLen bytes,
// aligned to dynAlign) and the string table. It returns their offsets
// and where the last ends.
func stackTables(rel, interpLen, dynLen, dynAlign, strLen uint64, interp, dyn, str bool) (interpRel, dynRel, strRel, end uint64) {
	if interp {
		interpRel = rel
		rel += interpLen
	}
	if dyn {
		rel = alignUp(rel, dynAlign)
		dynRel = rel
		rel += dynLen
	}
	if str {
		strRel = rel
		rel += strLen
	}
	return interpRel, dynRel, strRel, rel
}

// layoutTail places the region's unloaded tail: a copy of the section
// name table when a name was added (or it lives in the live region), then
// the section header table when it grows, shrinks or lived in the live
// region. An ET_EXEC file takes the copy in any case, so that a section
// follows the tables the region holds: patchelf's rewriter for
// executables aborts when the last section it replaces is the last one,
// and the name table is one it never replaces.
func (b *builder) layoutTail(L *regionLayout) error {
	f, h, live, ne := b.f, b.f.Header, b.f.region, b.ne
	if ne != nil && ne.shstr != nil {
		L.shstr = ne.shstr
	} else if h.Shstrndx > 0 && h.Shstrndx < len(f.Sections) {
		s := f.Sections[h.Shstrndx]
		if s.Type != elf.SHT_NOBITS && (live.contains(s.Offset) || h.Type == elf.ET_EXEC) {
			var err error
			if L.shstr, err = readAt(f.r, f.size, s.Offset, s.Size, "section name table"); err != nil {
				return err
			}
		}
	}
	L.moveSht = L.moveSht || L.phdrIn || live.contains(h.Shoff) || ne != nil && ne.count
	shTable := uint64(0)
	if len(L.secs) > 0 && L.moveSht {
		shTable = uint64(len(L.secs)) * uint64(f.shdrSize())
	}
	L.shstrRel, L.shRel, L.total = tailLayout(L.segSize, uint64(len(L.shstr)), L.shstr != nil, shTable)
	return nil
}

// tailLayout places the copied name table (shstrLen bytes, when copied)
// after the loaded part, which ends at seg, then the section header table
// (shTable bytes, 0 when it stays) 8-aligned. It returns their offsets
// and the region's size.
func tailLayout(seg, shstrLen uint64, copied bool, shTable uint64) (shstrRel, shRel, total uint64) {
	total = seg
	if copied {
		shstrRel = total
		total += shstrLen
	}
	shRel = alignUp(total, 8)
	if shTable > 0 {
		total = shRel + shTable
	}
	return shstrRel, shRel, total
}
