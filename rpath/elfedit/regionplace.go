package elfedit

import (
	"debug/elf"
	"slices"
)

// placeRegion decides where the region goes: after everything else in
// the file and in memory, in the free slot before the live region when it
// fits, else after it.
func (b *builder) placeRegion(L *regionLayout) error {
	f, h, live := b.f, b.f.Header, b.f.region
	A := maxPageSize(h.Machine)
	maxEnd, firstLoad, err := f.addressFloor()
	if err != nil {
		return err
	}
	// The new segment goes above everything, and every sum after this
	// must not overflow. ia64 puts data at 0x6000000000000000 (patchelf's
	// tests/no-rpath-ia64): a 64-bit file may use addresses up to 2^63.
	limit := uint64(1) << 62
	if h.Class == elf.ELFCLASS64 {
		limit = 1 << 63
	}
	if maxEnd > limit {
		return formatErr(-1, "segments end at 0x%x: no address space left for a new segment", maxEnd)
	}
	fl := f.Progs[firstLoad]
	pl := placement{memStart: alignUp(maxEnd, A), delta: fl.Vaddr - fl.Off, align: A,
		// With the table in the region, an executable's region must be
		// mapped with the first PT_LOAD's vaddr-offset: kernels before
		// 5.18 compute AT_PHDR as that plus e_phoff.
		exec: L.phdrIn && f.isExecutable()}
	if pl.exec && pl.delta%A != 0 {
		return formatErr(-1, "first PT_LOAD vaddr-offset 0x%x is not a multiple of the page size 0x%x", pl.delta, A)
	}
	L.atEnd = live != nil && live.end == uint64(f.size)
	var free *rng
	if L.atEnd {
		free = &rng{live.base, live.off}
	}
	L.off, L.vaddr = pl.choose(uint64(f.size), free, L.total)
	// The hole before an executable's region (kept sparse) spans its .bss;
	// anything beyond 1 GiB comes from addresses no real file has.
	if L.off > uint64(f.size)+maxHole {
		return formatErr(-1, "a new segment would start 0x%x bytes past the end of the file", L.off-uint64(f.size))
	}
	if L.vaddr < pl.memStart {
		return formatErr(-1, "first PT_LOAD's vaddr 0x%x and offset 0x%x leave no place for a new segment above the others", fl.Vaddr, fl.Off)
	}
	if L.off+L.total < L.off || L.vaddr+L.segSize < L.vaddr || (h.Class == elf.ELFCLASS32 && (L.vaddr+L.segSize > 1<<32 || L.off+L.total > 1<<32)) {
		return formatErr(-1, "no room for a new segment in the address space")
	}
	return nil
}

// addressFloor is the end of every address the file claims outside the
// live region (segments, other program headers, allocated sections), and
// the index of the first PT_LOAD. A PT_LOAD that claims bytes past the
// end of the file is refused: it would also claim the appended region.
func (f *File) addressFloor() (maxEnd uint64, firstLoad int, err error) {
	live := f.region
	firstLoad = -1
	for i, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if firstLoad < 0 {
			firstLoad = i
		}
		if live != nil && i == live.prog {
			continue
		}
		maxEnd = max(maxEnd, p.Vaddr+max(p.Memsz, p.Filesz)) // a lying p_filesz > p_memsz still claims the range
		if p.Off > uint64(f.size) || p.Filesz > uint64(f.size)-p.Off {
			return 0, 0, formatErr(int64(f.Header.Phoff)+int64(i)*int64(f.phdrSize()), "PT_LOAD[%d] file range 0x%x+0x%x lies past the end of the file: nothing can be appended", i, p.Off, p.Filesz)
		}
	}
	// A PT_DYNAMIC or PT_GNU_RELRO outside every PT_LOAD (a broken file)
	// claims its addresses too.
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD && p.Type != elf.PT_GNU_STACK && p.Memsz > 0 && !live.contains(p.Off) {
			maxEnd = max(maxEnd, p.Vaddr+max(p.Memsz, p.Filesz))
		}
	}
	for _, sec := range f.Sections {
		if sec.Flags&elf.SHF_ALLOC != 0 && !(sec.Type != elf.SHT_NOBITS && live.contains(sec.Offset)) {
			maxEnd = max(maxEnd, sec.Addr+sec.Size)
		}
	}
	return maxEnd, firstLoad, nil
}

// placement maps a file offset for the region to its address: above
// memStart, congruent modulo the page size align; for an executable
// whose region holds the program header table, at the first PT_LOAD's
// vaddr-offset delta.
type placement struct {
	memStart, delta, align uint64
	exec                   bool
}

// at is the first place at or after file offset from.
func (p placement) at(from uint64) (off, vaddr uint64) {
	if p.exec {
		off = alignUp(from, p.align)
		if p.memStart >= p.delta && p.memStart-p.delta > off {
			off = p.memStart - p.delta
		}
		return off, off + p.delta
	}
	off = alignUp(from, 16)
	return off, p.memStart + off%p.align
}

// choose places a region of total bytes: in free (the slot of the live
// region that ends the file, from its base) when it fits before free.hi,
// else after the file, which ends at size.
func (p placement) choose(size uint64, free *rng, total uint64) (off, vaddr uint64) {
	if free == nil {
		return p.at(size)
	}
	if off, vaddr = p.at(free.lo); off+total > free.hi {
		return p.at(size)
	}
	return off, vaddr
}

// relocateProgs points the program headers at what the region holds:
// the note area's PT_NOTE, what moved with the blobs, PT_PHDR, PT_INTERP,
// PT_DYNAMIC, and the region's own PT_LOAD.
func (b *builder) relocateProgs(L *regionLayout) {
	off, vaddr, es := L.off, L.vaddr, b.f.dynSize()
	for i := range L.progs {
		p := &L.progs[i]
		if i == L.loadAt {
			continue
		}
		if i == L.noteAt && !L.adopted {
			p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz = off+L.noteRel, vaddr+L.noteRel, vaddr+L.noteRel, L.noteSize, L.noteSize
			continue
		}
		if i == L.noteAt {
			p.Filesz += L.noteSize
			p.Memsz += L.noteSize
		}
		if r, ok := L.reloc(p.Off); ok && p.Type != elf.PT_LOAD {
			p.Off, p.Vaddr, p.Paddr = off+r, vaddr+r, vaddr+r
		}
		switch p.Type {
		case elf.PT_PHDR:
			if L.phdrIn {
				p.Off, p.Vaddr, p.Paddr = off+L.phRel, vaddr+L.phRel, vaddr+L.phRel
			}
			p.Filesz, p.Memsz = L.phSize, L.phSize
		case elf.PT_INTERP:
			if L.moveInterp {
				n := uint64(len(b.interp)) + 1
				p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz = off+L.interpRel, vaddr+L.interpRel, vaddr+L.interpRel, n, n
			}
		case elf.PT_DYNAMIC:
			if L.moveDyn {
				n := uint64(L.dynSlots) * es
				p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz = off+L.dynRel, vaddr+L.dynRel, vaddr+L.dynRel, n, n
			}
		}
	}
	flags := elf.PF_R
	if L.moveDyn {
		flags |= elf.PF_W // glibc before 2.35 writes DT_DEBUG into .dynamic
	}
	L.progs[L.loadAt] = elf.ProgHeader{Type: elf.PT_LOAD, Flags: flags, Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: L.segSize, Memsz: L.segSize, Align: maxPageSize(b.f.Header.Machine)}
}

// repointDynamic points the entries of a .dynamic that moves at the
// tables that moved with the blobs and at the rewritten tables, and
// decides the string table's address and size .dynamic gives.
func (b *builder) repointDynamic(L *regionLayout) {
	f := b.f
	L.strAddr, L.strSize = f.strAddr, uint64(len(f.strtab))
	if L.moveStr {
		L.strAddr, L.strSize = L.vaddr+L.strRel, b.sl.size()
	}
	if !L.moveDyn {
		return
	}
	for i, d := range b.ents {
		if r, ok := L.blobAddr(f, d.val); ok && addrTags[d.tag] && d.tag != elf.DT_STRTAB {
			b.ents[i].val = L.vaddr + r
		}
	}
	if r, ok := L.blobAddr(f, f.strAddr); ok && !L.moveStr {
		L.strAddr = L.vaddr + r
	}
	for k, c := range b.copies {
		for i, d := range b.ents {
			if d.tag == c.tag {
				b.ents[i].val = L.vaddr + L.copyRel[k]
			}
		}
	}
}

// sectionLayout is where the section headers go: the final table, the
// file's index of each of its headers (-1 for a new one), the old index
// to new map when they were renumbered, and the allocated sections whose
// address changed.
type sectionLayout struct {
	final      []Section
	from       []int
	secMap     []int
	renumbered bool
	shstrndx   int
	moves      map[int]sectionMove
}

// placeSections points each section header at where its bytes now lie
// (moved with a blob, in the note area, a table the region holds) and
// sorts the headers when a linker's order needs it.
func (b *builder) placeSections(L *regionLayout) (*sectionLayout, error) {
	f := b.f
	sl := &sectionLayout{shstrndx: L.shstrndx, moves: map[int]sectionMove{}}
	if b.ne != nil && b.ne.count {
		sl.secMap = b.ne.secMap
	}
	sl.renumbered = sl.secMap != nil
	if len(L.secs) == 0 {
		return sl, nil
	}
	areaSec := map[int]int{}
	if L.noteAt >= 0 {
		for a, n := range b.ne.area {
			if n.sec >= 0 {
				areaSec[n.sec] = a
			}
		}
	}
	sl.final = make([]Section, len(L.secs))
	dynstr := f.dynstrSection()
	for j, s := range L.secs {
		oi := L.orig[j]
		before := s
		if oi >= 0 {
			before = f.Sections[oi]
		}
		a, isArea := areaSec[j]
		s, err := b.placeSection(L, s, before, oi, j, a, isArea, dynstr)
		if err != nil {
			return nil, err
		}
		if oi >= 0 && (before.Flags&elf.SHF_ALLOC != 0 || isArea) && s.Addr != before.Addr {
			sl.moves[oi] = sectionMove{before.Addr, before.Size, s.Addr}
		}
		sl.final[j] = s
	}
	sl.from = slices.Clone(L.orig)
	sorted, pos, ok := f.sortSections(sl.final, len(L.progs))
	if !ok {
		return sl, nil
	}
	sl.final = sorted
	if sl.shstrndx >= 0 && sl.shstrndx < len(pos) {
		sl.shstrndx = pos[sl.shstrndx]
	}
	for j, k := range pos {
		sl.from[k] = L.orig[j]
	}
	sl.secMap, sl.renumbered = composeMap(sl.secMap, pos, len(f.Sections)), true
	return sl, nil
}

// composeMap is secMap (old index to new, nil for the identity over n
// sections) followed by pos.
func composeMap(secMap, pos []int, n int) []int {
	if secMap == nil {
		secMap = make([]int, n)
		for i := range secMap {
			secMap[i] = i
		}
	}
	composed := make([]int, len(secMap))
	for i, j := range secMap {
		composed[i] = -1
		if j >= 0 {
			composed[i] = pos[j]
		}
	}
	return composed
}

// placeSection is section header s (the file's before, index oi, j in
// the edited table; note area piece area when isArea) pointed at where
// its bytes lie in the region. dynstr is the index of .dynstr.
func (b *builder) placeSection(L *regionLayout, s, before Section, oi, j, area int, isArea bool, dynstr int) (Section, error) {
	f, live := b.f, b.f.region
	off, vaddr := L.off, L.vaddr
	relocated := false
	// An empty section keeps its place (it may as well end the section
	// before the moved bytes), except the interpreter's, which follows
	// PT_INTERP whatever its size.
	if r, ok := L.reloc(s.Offset); ok && (s.Size > 0 || oi >= 0 && f.isInterpSection(before)) {
		// Only whole sections move: one that runs past the moved bytes
		// would be described over what follows them.
		if e, ok := L.reloc(s.Offset + s.Size - 1); s.Type != elf.SHT_NOBITS && s.Size > 0 && (!ok || e != r+s.Size-1) {
			return s, formatErr(-1, "section %d %s (0x%x+0x%x) lies partly in the bytes that move out of the program header table's way", oi, s.Name, s.Offset, s.Size)
		}
		s.Offset, s.Addr = off+r, vaddr+r
		relocated = true
	}
	copied := func(c *tableCopy) bool { return c.secType == before.Type && c.addr == before.Addr }
	switch {
	case isArea:
		n := uint64(len(b.ne.area[area].b))
		s.Offset, s.Addr, s.Size = off+L.noteRel+L.areaOff[area], vaddr+L.noteRel+L.areaOff[area], n
		s.Type, s.Flags, s.Addralign = elf.SHT_NOTE, s.Flags|elf.SHF_ALLOC, 4
	case L.moveStr && oi >= 0 && oi == dynstr:
		s.Offset, s.Addr, s.Size = off+L.strRel, vaddr+L.strRel, b.sl.size()
	case oi >= 0 && before.Flags&elf.SHF_ALLOC != 0 && slices.ContainsFunc(b.copies, copied):
		k := slices.IndexFunc(b.copies, copied)
		s.Offset, s.Addr, s.Size = off+L.copyRel[k], vaddr+L.copyRel[k], uint64(len(b.copies[k].data))
	case L.moveDyn && s.Type == elf.SHT_DYNAMIC:
		s.Offset, s.Addr, s.Size = off+L.dynRel, vaddr+L.dynRel, uint64(L.dynSlots)*f.dynSize()
	case L.moveInterp && oi >= 0 && f.isInterpSection(before):
		s.Offset, s.Addr, s.Size = off+L.interpRel, vaddr+L.interpRel, uint64(len(b.interp))+1
	case L.shstr != nil && j == L.shstrndx:
		s.Offset, s.Size = off+L.shstrRel, uint64(len(L.shstr))
	case !relocated && oi >= 0 && live != nil && before.Flags&elf.SHF_ALLOC != 0 && before.Type != elf.SHT_NOBITS && before.Size > 0 && live.contains(before.Offset):
		// A loaded section of the live region that none of the above
		// places would keep an address the new region maps to other bytes.
		return s, formatErr(-1, "section %d %s (type %v) in the region an earlier edit added cannot be moved to the new one", oi, before.Name, before.Type)
	}
	return s, nil
}
