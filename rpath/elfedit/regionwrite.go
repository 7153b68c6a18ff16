package elfedit

import (
	"slices"
)

// layRegion plans an edit through a region laid out with (phdrIn) or
// without the program header table: it decides the layout, then emits
// its writes. ok is false when that layout cannot be used.
func (b *builder) layRegion(phdrIn bool) (*Plan, bool, error) {
	L, ok, err := b.decideRegion(phdrIn)
	if !ok || err != nil {
		return nil, false, err
	}
	buf, err := b.readCarried(L)
	if err != nil {
		return nil, false, err
	}
	secs, err := b.placeSections(L)
	if err != nil {
		return nil, false, err
	}
	zero := b.fillRegion(L, buf)
	sht := b.fillSections(L, secs, buf)
	symSteps := b.fillSymbols(L, secs, buf)
	b.add(StepUnused, "region: moved tables", L.off, buf)
	for _, bl := range L.blobs {
		b.hint(L.off+bl.rel, bl.lo, bl.hi-bl.lo)
	}
	if L.moveStr {
		b.hint(L.off+L.strRel, b.f.strOff, b.sl.limit)
	}
	if err := b.commitRegion(L, secs, sht, symSteps); err != nil {
		return nil, false, err
	}
	b.clearMoved(L, zero)
	return b.finish(Region, b.dropLiveRegion(L)), true, nil
}

// readCarried is the region's buffer with its header and the bytes the
// blobs move.
func (b *builder) readCarried(L *regionLayout) ([]byte, error) {
	f := b.f
	buf := f.scratch(L.total)
	copy(buf, regionMagic[:])
	base := uint64(f.size)
	if f.region != nil {
		base = f.region.base
	}
	f.order.PutUint64(buf[8:], base)
	f.order.PutUint64(buf[16:], L.carryEnd-L.carryRel)
	if L.phdrIn {
		f.order.PutUint64(buf[24:], regionPhdrs)
	}
	for _, bl := range L.blobs {
		if err := f.readFull(buf[bl.rel:bl.rel+(bl.hi-bl.lo)], bl.lo, "moved section"); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// fillRegion writes what the region holds into buf and clears the dead
// copies that came with the
// blobs: of a replaced interpreter or string table (a replaced loader's
// store path would stay in the file and its closure), of removed notes.
// It returns the removed notes outside the blobs, to be zeroed in place.
func (b *builder) fillRegion(L *regionLayout, buf []byte) (zero []rng) {
	f := b.f
	clearCarried := func(lo, n uint64) {
		if r, ok := L.reloc(lo); ok {
			clear(buf[r:min(r+n, L.carryEnd)])
		}
	}
	if L.moveInterp {
		for _, o := range f.interpOwn() {
			clearCarried(o.lo, o.hi-o.lo)
		}
	}
	if L.moveStr {
		clearCarried(f.strOff, uint64(len(f.strtab)))
	}
	if b.ne != nil {
		for _, z := range b.ne.zero {
			if _, ok := L.reloc(z.lo); ok {
				clearCarried(z.lo, z.hi-z.lo)
			} else {
				zero = append(zero, z)
			}
		}
	}
	if L.phdrIn {
		ps := uint64(f.phdrSize())
		for i, p := range L.progs {
			f.encodeProg(buf[L.phRel+uint64(i)*ps:], p)
		}
	}
	if L.moveInterp {
		copy(buf[L.interpRel:], b.interp)
	}
	if L.moveStr {
		b.sl.copyTo(buf[L.strRel : L.strRel+b.sl.size()])
	}
	if L.moveDyn {
		for k, c := range b.copies {
			copy(buf[L.copyRel[k]:], c.data)
		}
		copy(buf[L.dynRel:], b.dynBytes(L.strAddr, L.strSize, L.dynSlots))
	}
	if L.noteAt >= 0 {
		for a, n := range b.ne.area {
			copy(buf[L.noteRel+L.areaOff[a]:], n.b)
		}
	}
	if L.shstr != nil {
		copy(buf[L.shstrRel:], L.shstr)
	}
	return zero
}

// fillSections encodes the section header table, into the region when it
// moves, and hints each header's original. It returns the table.
func (b *builder) fillSections(L *regionLayout, secs *sectionLayout, buf []byte) []byte {
	f, h := b.f, b.f.Header
	if len(L.secs) == 0 {
		return nil
	}
	es := uint64(f.shdrSize())
	sht := make([]byte, len(secs.final)*int(es))
	for j, s := range secs.final {
		copy(sht[uint64(j)*es:], f.encodeSection(s))
	}
	at := h.Shoff
	if L.moveSht {
		copy(buf[L.shRel:], sht)
		at = L.off + L.shRel
	}
	// Each header is its original with a few fields changed, at
	// another index when they were sorted.
	for k, oi := range secs.from {
		if oi >= 0 {
			b.hint(at+uint64(k)*es, h.Shoff+uint64(oi)*es, es)
		}
	}
	return sht
}

// fillSymbols moves and renumbers the symbols of moved and renumbered
// sections: the writes to a .dynsym the region holds go into buf, the
// others are returned.
func (b *builder) fillSymbols(L *regionLayout, secs *sectionLayout, buf []byte) []Step {
	symSteps, dynsymEdits := b.f.fixSymbols(secs.moves, secs.secMap)
	for _, st := range dynsymEdits {
		if r, ok := L.reloc(uint64(st.Off)); ok {
			copy(buf[r:], st.data)
		} else {
			symSteps = append(symSteps, st)
		}
	}
	return symSteps
}

// commitRegion adds the section header table when it stays, the symbol
// writes, and the commit: the ELF header pointing at a program header
// table in the region, or the ELF header and the table in place written
// together (one write switches PT_INTERP, PT_DYNAMIC, PT_NOTE and
// e_phnum at once).
func (b *builder) commitRegion(L *regionLayout, secs *sectionLayout, sht []byte, symSteps []Step) error {
	f, h := b.f, b.f.Header
	shoff := h.Shoff
	if len(L.secs) > 0 {
		if L.moveSht {
			shoff = L.off + L.shRel
		} else {
			b.add(StepNeutral, "section header table", h.Shoff, sht)
		}
	}
	b.steps = append(b.steps, symSteps...)
	ehdr := slices.Clone(f.rawEhdr)
	phoff := h.Phoff
	if L.phdrIn {
		phoff = L.off + L.phRel
	}
	f.putEhdr(ehdr, phoff, len(L.progs), shoff)
	if secs.renumbered {
		f.putShnum(ehdr, len(L.secs), secs.shstrndx)
	}
	if L.phdrIn {
		b.add(StepCommit, "ELF header: new program header table", 0, ehdr)
		return nil
	}
	head, err := readAt(f.r, f.size, 0, h.Phoff, "bytes before the program header table")
	if err != nil {
		return err
	}
	copy(head, ehdr)
	// A table that shrank is followed by zeros up to its old end.
	ps := uint64(f.phdrSize())
	tbl := make([]byte, max(L.phSize, uint64(h.Phnum)*ps))
	for i, p := range L.progs {
		f.encodeProg(tbl[uint64(i)*ps:], p)
	}
	b.add(StepCommit, "ELF header and program header table", 0, append(head, tbl...))
	return nil
}

// clearMoved clears what the region replaced: the old string table (only
// one that moves is dead: one that stays may share a dropped string with
// a version reference, and its dead strings are scrubbed in place), the
// moved blobs past the program header table, the old interpreter, and
// the removed notes outside the region (zero).
func (b *builder) clearMoved(L *regionLayout, zero []rng) {
	f, h, live := b.f, b.f.Header, b.f.region
	ps := uint64(f.phdrSize())
	if L.moveStr && !live.contains(f.strOff) {
		b.scrubOld()
	}
	tblEnd := h.Phoff + max(L.phSize, uint64(h.Phnum)*ps)
	if L.phdrIn {
		tblEnd = 0
	}
	for _, bl := range L.blobs {
		if live != nil && bl.lo >= live.off {
			continue
		}
		if lo := max(bl.lo, tblEnd); lo < bl.hi {
			b.add(StepHygiene, "clear moved sections", lo, zeros(bl.hi-lo))
		}
	}
	if L.moveInterp && b.interpChanged && f.interpProg >= 0 && !live.contains(f.Progs[f.interpProg].Off) {
		for _, o := range f.interpOwn() {
			if _, moved := L.reloc(o.lo); !moved {
				if lo := max(o.lo, tblEnd); lo < o.hi {
					b.add(StepHygiene, "clear the old interpreter", lo, zeros(o.hi-lo))
				}
			}
		}
	}
	for _, z := range zero {
		if live.contains(z.lo) {
			continue // the old region is zeroed whole
		}
		if z.hi <= h.Phoff+uint64(h.Phnum)*ps && z.lo >= h.Phoff {
			continue // under the table
		}
		b.add(StepHygiene, "zero the removed note", z.lo, zeros(z.hi-z.lo))
	}
}

// dropLiveRegion truncates the live region when the new one took its
// slot before it, else zeroes it, and returns the file's new size.
func (b *builder) dropLiveRegion(L *regionLayout) int64 {
	f, live := b.f, b.f.region
	newSize := max(int64(L.off+L.total), f.size)
	if live == nil {
		return newSize
	}
	if L.atEnd && L.off+L.total <= live.off {
		newSize = int64(L.off + L.total)
		b.steps = append(b.steps, Step{Kind: StepTruncate, What: "drop the old region", Len: newSize})
	} else {
		b.add(StepHygiene, "zero the old region", live.off, zeros(live.end-live.off))
	}
	return newSize
}
