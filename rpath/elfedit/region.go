package elfedit

import (
	"bytes"
	"debug/elf"
	"slices"
)

// regionMagic starts every region this package appends. The region header
// is regionHeader bytes: the magic, the region base (the end of the file
// before the first region), the length of the carried bytes that follow the
// header (sections moved out of the way of the program header table), and
// flags, each a 64-bit word in the file's byte order. It lets a later edit
// find the region and reuse its space instead of appending another.
var regionMagic = [8]byte{0x7f, 'c', 'u', 'd', 'a', 'p', 'c', 1}

const (
	regionHeader = 32
	// regionPhdrs flags a region that holds the program header table
	// (the fallback layout, used when the table cannot grow in place).
	regionPhdrs = 1
)

// spareDynSlots are the DT_NULL slots a moved .dynamic gets beyond the
// terminator, so that a later edit adding an entry can be done in place.
const spareDynSlots = 4

// regionInfo describes the live region of a file edited before.
type regionInfo struct {
	prog  int    // index of its PT_LOAD
	off   uint64 // file offset of the region (and of its header)
	end   uint64 // end of the region's bytes, a section header table after it included
	base  uint64 // end of the file before the first region was appended
	carry uint64 // bytes of moved sections after the header (and the program header table)
	// carryOff is the file offset of the carried bytes: right after the
	// header, or after the program header table when the region holds it.
	carryOff uint64
	phdrIn   bool // the program header table lives in the region
}

func (r *regionInfo) contains(off uint64) bool { return r != nil && off >= r.off && off < r.end }

// findRegion recognises a region appended by an earlier edit: the last
// PT_LOAD starts with regionMagic.
func (f *File) findRegion() *regionInfo {
	h := f.Header
	last := -1
	for i, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			last = i
		}
	}
	if last < 0 {
		return nil
	}
	p := f.Progs[last]
	// A region's segment maps exactly its bytes (Filesz == Memsz, see
	// regionLayout). A last segment with zero-filled memory past its bytes
	// (.bss), which most files end with, is not one, and its first bytes,
	// often far from every table a plan reads, are not read to find out.
	if p.Filesz < regionHeader || p.Memsz != p.Filesz {
		return nil
	}
	b, err := readAt(f.r, f.size, p.Off, regionHeader, "region header")
	if err != nil || !bytes.Equal(b[:8], regionMagic[:]) {
		return nil
	}
	o := f.order
	ri := &regionInfo{prog: last, off: p.Off, end: p.Off + p.Filesz, base: o.Uint64(b[8:]),
		carry: o.Uint64(b[16:]), phdrIn: o.Uint64(b[24:])&regionPhdrs != 0}
	// The unloaded tail: a copy of the section name table, then the
	// section header table.
	tail := ri.end
	if h.Shstrndx > 0 && h.Shstrndx < len(f.Sections) {
		if s := f.Sections[h.Shstrndx]; s.Type != elf.SHT_NOBITS && s.Offset >= tail && s.Offset <= tail+16 && s.Size <= uint64(f.size) {
			tail = s.Offset + s.Size
			ri.end = tail
		}
	}
	if h.Shoff >= tail && h.Shoff <= tail+16 {
		ri.end = h.Shoff + uint64(h.Shnum)*uint64(h.Shentsize)
	}
	ri.carryOff = ri.off + regionHeader
	if ri.phdrIn {
		ri.carryOff += uint64(h.Phnum) * uint64(h.Phentsize)
	}
	if ri.base > ri.off || ri.end > uint64(f.size) || ri.carryOff-ri.off > p.Filesz || ri.carry > p.Filesz-(ri.carryOff-ri.off) {
		return nil
	}
	if ri.phdrIn != (h.Phoff >= ri.off && h.Phoff < ri.end) {
		return nil
	}
	// A region is appended: every other segment ends before its base. (The
	// magic alone could be planted at the start of a real segment.)
	for i, q := range f.Progs {
		if q.Type == elf.PT_LOAD && i != last && q.Off+q.Filesz > ri.base {
			return nil
		}
	}
	// And so does every section before it: a base inside them (a header
	// mangled, mutation seed 32) would have the next region laid over
	// .symtab and its neighbours.
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS && s.Size > 0 && s.Offset < ri.off && s.Offset+s.Size > ri.base {
			return nil
		}
	}
	return ri
}

// maxPageSize is the largest page size the target's kernels use. Segments
// we add are aligned to it: 64 KiB must be assumed wherever a kernel may run
// with 64 KiB pages.
func maxPageSize(m elf.Machine) uint64 {
	switch m {
	case elf.EM_AARCH64, elf.EM_PPC64, elf.EM_PPC, elf.EM_ARM, elf.EM_LOONGARCH, elf.EM_MIPS, elf.EM_IA_64:
		return 0x10000
	case elf.EM_SPARCV9:
		return 0x100000
	}
	return 0x1000
}

// MaxPageSize is the alignment of every segment elfedit adds to a file
// of machine m: the largest page size the machine's kernels use, so it
// satisfies any smaller page size a caller asks for.
func MaxPageSize(m elf.Machine) uint64 { return maxPageSize(m) }

// isExecutable reports files the kernel may start, for which AT_PHDR
// matters.
func (f *File) isExecutable() bool {
	return f.Header.Type == elf.ET_EXEC || f.interpProg >= 0 || f.selfRelocating()
}

// selfRelocating reports a static PIE or a dynamic loader: the kernel
// starts it, and its startup code relocates it through _DYNAMIC.
func (f *File) selfRelocating() bool {
	k := f.Kind()
	return k == KindStaticPIE || k == KindLoader
}

// blob is a file range moved into the region as it is.
type blob struct {
	lo, hi uint64 // old file range
	rel    uint64 // offset in the region
}

// regionLayout is the content of a region, relative to its start.
type regionLayout struct {
	phdrIn                    bool
	phRel, phSize             uint64
	blobs                     []blob
	carryEnd                  uint64
	interpRel, dynRel, strRel uint64
	dynSlots                  int
	segSize, shRel, total     uint64
	moveInterp, moveDyn       bool
	moveStr, moveSht          bool
	noteRel, noteSize         uint64
	shstrRel                  uint64
	copyRel                   []uint64 // where builder.copies go
}

// region lays out an appended PT_LOAD. The program header table stays where
// it is when it can grow by one entry in place, which binutils (strip,
// objcopy) require: they place the table right after the ELF header.
// Room for that entry is made by moving .interp and note sections, never
// code or data, into the region. Otherwise the table itself moves into the
// region. Either way the commit is a single write: of the ELF header and
// the program header table together (they are adjacent), or of the ELF
// header alone.
func (b *builder) region() (*Plan, error) {
	f := b.f
	live := f.region
	if b.ne == nil && live != nil && slices.ContainsFunc(f.Progs, func(p elf.ProgHeader) bool {
		return p.Type == elf.PT_NOTE && p.Off+p.Filesz > live.carryOff+live.carry && p.Off < f.Progs[live.prog].Off+f.Progs[live.prog].Filesz
	}) {
		// Notes an earlier edit wrote into the live region move to the
		// new one.
		all, err := f.allNotes()
		if err != nil {
			return nil, err
		}
		if b.ne, err = f.editNotes(&noteChanges{all: all}, true); err != nil {
			return nil, err
		}
	}
	if live == nil || !live.phdrIn {
		if p, ok, err := b.regionLayout(false); ok || err != nil {
			return p, err
		}
	}
	p, _, err := b.regionLayout(true)
	return p, err
}

// maxBlobMove bounds what is moved out of the program header table's way.
// Beyond it (a library whose .dynsym of several MiB follows the table, as
// LLVM's does) the table itself moves instead: a few KiB written rather
// than megabytes, at the price of a layout binutils' strip cannot rewrite.
const maxBlobMove = 1 << 20

// maxHole bounds the sparse gap between the end of a file and a region.
const maxHole = 1 << 30

func blobBytes(bs []blob) uint64 {
	var n uint64
	for _, b := range bs {
		n += b.hi - b.lo
	}
	return n
}

// isInterpSection reports whether s is the section of PT_INTERP's string:
// at its address, and either an allocated SHT_PROGBITS or named .interp
// (the name is what the verifier goes by, whatever type and flags a file
// gives the section).
func (f *File) isInterpSection(s Section) bool {
	return f.interpProg >= 0 && s.Addr == f.Progs[f.interpProg].Vaddr &&
		(s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 || s.Name == ".interp")
}

// movableSection reports sections nothing refers to by address except the
// program headers or the dynamic section, so that moving them (and
// repointing those) is safe: .interp, notes, and the dynamic-linking tables
// (.gnu.hash, .hash, .dynsym, .dynstr, the symbol-version tables). Code and
// data (SHT_PROGBITS, such as CUDA's .nv_fatbin) never move.
func (f *File) movableSection(s Section) bool {
	if f.isInterpSection(s) {
		return true
	}
	if s.Flags&elf.SHF_ALLOC == 0 {
		return false
	}
	switch s.Type {
	case elf.SHT_NOTE:
		return true
	case elf.SHT_GNU_HASH, elf.SHT_HASH, elf.SHT_DYNSYM, elf.SHT_GNU_VERSYM, elf.SHT_GNU_VERNEED, elf.SHT_GNU_VERDEF:
		return f.IsDynamic()
	case elf.SHT_STRTAB:
		return f.IsDynamic() && s.Addr == f.strAddr
	}
	return false
}

// addrTags are the dynamic tags whose value is the address of a table that
// movableSection lets move.
var addrTags = map[elf.DynTag]bool{
	elf.DT_GNU_HASH: true, elf.DT_HASH: true, elf.DT_SYMTAB: true, elf.DT_STRTAB: true,
	elf.DT_VERSYM: true, elf.DT_VERNEED: true, elf.DT_VERDEF: true,
}

// checkPointers refuses a layout that would leave an address of .dynamic
// pointing at bytes it clears or replaces: into a blob it moves, or into
// the live region, which the new one takes the place of. Only the tables
// of addrTags are repointed (blobAddr), the string table and the copied
// tables are laid out anew; nothing else the loader reads or calls
// through (DT_PLTGOT, DT_INIT, DT_FINI_ARRAY…) lies in what a layout may
// move in a file a linker wrote, so one that does comes from a mangled
// file, and its target would be left behind (a fault of mutation seed
// 25: a DT_PLTGOT aimed into an earlier edit's region).
func (b *builder) checkPointers(live *regionInfo, blobAddr func(uint64) (uint64, bool)) error {
	f := b.f
	for _, d := range b.ents {
		if d.val == 0 || d.tag == elf.DT_STRTAB || !slices.Contains(pointerTags[:], d.tag) ||
			slices.ContainsFunc(b.copies, func(c *tableCopy) bool { return c.tag == d.tag }) {
			continue
		}
		_, inBlob := blobAddr(d.val)
		if inBlob && addrTags[d.tag] {
			continue // repointed
		}
		if o, ok := f.vaddrToOff(d.val, 0); inBlob || ok && live.contains(o) {
			return formatErr(-1, "%v 0x%x points into bytes the edit would move or replace, and is not a table it moves", d.tag, d.val)
		}
	}
	return nil
}

// gapBlobs finds what occupies the bytes after the program header table
// that k more entries need, and returns it as blobs to move, if all of it
// may move.
func (f *File) gapBlobs(k int) ([]blob, bool, bool) {
	h := f.Header
	ps := uint64(f.phdrSize())
	tblEnd := h.Phoff + uint64(h.Phnum)*ps
	gap := rng{tblEnd, tblEnd + uint64(k)*ps}
	if h.Phoff < uint64(len(f.rawEhdr)) {
		return nil, false, false
	}
	// The grown table must stay inside the PT_LOAD that maps it.
	inLoad := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && h.Phoff >= p.Off && gap.hi <= p.Off+p.Filesz && p.Filesz == p.Memsz || p.Type == elf.PT_LOAD && h.Phoff >= p.Off && gap.hi <= p.Off+p.Filesz {
			inLoad = true
		}
	}
	if !inLoad {
		return nil, false, false
	}
	// Movable ranges: PT_INTERP, PT_NOTE, PT_GNU_PROPERTY and the sections
	// .interp and SHT_NOTE. Nothing that code or relocations refer to.
	var movable []rng
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP, elf.PT_NOTE, elf.PT_GNU_PROPERTY:
			if p.Filesz > 0 {
				movable = append(movable, rng{p.Off, p.Off + p.Filesz})
			}
		}
	}
	for _, s := range f.Sections {
		if s.Size > 0 && f.movableSection(s) {
			movable = append(movable, rng{s.Offset, s.Offset + s.Size})
		}
	}
	// Close over overlaps, starting from what touches the gap.
	var set []rng
	for _, m := range movable {
		if m.overlaps(gap) {
			set = append(set, m)
		}
	}
	for changed := true; changed; {
		changed = false
		for _, m := range movable {
			if slices.Contains(set, m) {
				continue
			}
			for _, s := range set {
				if m.overlaps(s) {
					set = append(set, m)
					changed = true
					break
				}
			}
		}
	}
	merged := union(set)
	covered := func(x rng) bool {
		return slices.ContainsFunc(merged, func(m rng) bool { return x.lo >= m.lo && x.hi <= m.hi })
	}
	moveSht := false
	if h.Shoff > 0 && (rng{h.Shoff, h.Shoff + uint64(h.Shnum)*uint64(h.Shentsize)}).overlaps(gap) {
		moveSht = true
	}
	for i, s := range f.Sections {
		if i == 0 || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		r := rng{s.Offset, s.Offset + s.Size}
		if r.overlaps(gap) && !covered(r) {
			return nil, false, false
		}
	}
	// Bytes of the gap outside every moved range and every section must be
	// zero padding (the only evidence there is in a file without sections).
	pad, err := readAt(f.r, f.size, gap.lo, gap.hi-gap.lo, "program header gap")
	if err != nil {
		return nil, false, false
	}
	for i, c := range pad {
		at := gap.lo + uint64(i)
		inSht := moveSht && at >= h.Shoff && at < h.Shoff+uint64(h.Shnum)*uint64(h.Shentsize)
		if c != 0 && !inSht && !slices.ContainsFunc(merged, func(m rng) bool { return at >= m.lo && at < m.hi }) {
			return nil, false, false
		}
	}
	var out []blob
	for _, m := range merged {
		out = append(out, blob{lo: m.lo, hi: m.hi})
	}
	return out, moveSht, true
}

func (b *builder) regionLayout(phdrIn bool) (*Plan, bool, error) {
	f := b.f
	h := f.Header
	live := f.region
	es := f.dynSize()
	ps := uint64(f.phdrSize())
	ne := b.ne

	L := regionLayout{phdrIn: phdrIn}
	progs := slices.Clone(f.Progs)
	secs, orig := f.Sections, make([]int, len(f.Sections))
	for i := range orig {
		orig[i] = i
	}
	shstrndx := h.Shstrndx
	if ne != nil {
		progs, secs, orig, shstrndx = slices.Clone(ne.progs), ne.secs, ne.orig, ne.shstrndx
	}
	loadAt := -1
	if live != nil {
		lp := f.Progs[live.prog]
		loadAt = slices.IndexFunc(progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_LOAD && p.Off == lp.Off })
	} else {
		last := -1
		for i, p := range progs {
			if p.Type == elf.PT_LOAD {
				last = i
			}
		}
		loadAt = last + 1
		progs = slices.Insert(progs, loadAt, elf.ProgHeader{Type: elf.PT_LOAD})
	}
	// The carried bytes: what the live region carries, then what must
	// move out of the way of a program header table of n entries.
	carryRel := uint64(regionHeader)
	layoutBlobs := func(n int) (blobs []blob, end uint64, moveSht, ok bool) {
		rel := uint64(regionHeader)
		if phdrIn {
			rel += uint64(n) * ps
		}
		carryRel = rel
		if live != nil && live.carry > 0 {
			blobs = append(blobs, blob{lo: live.carryOff, hi: live.carryOff + live.carry, rel: rel})
			rel += live.carry
		}
		if k := n - h.Phnum; k > 0 && !phdrIn {
			gap, ms, ok := f.gapBlobs(k)
			if !ok || blobBytes(gap) > maxBlobMove {
				return nil, 0, false, false
			}
			moveSht = ms
			for _, bl := range gap {
				rel = alignUp(rel, 16) + bl.lo%16
				bl.rel = rel
				rel += bl.hi - bl.lo
				blobs = append(blobs, bl)
			}
		}
		return blobs, rel, moveSht, true
	}
	// The note area follows the carried bytes. A 4-aligned PT_NOTE that
	// ends exactly there (moved with them) is extended over it: one
	// program header less to make room for (static executables have
	// code-referenced relocations right after their notes).
	noteAt, adopted := -1, false
	var rel uint64
	var ok bool
	if ne != nil && len(ne.area) > 0 {
		if L.blobs, rel, L.moveSht, ok = layoutBlobs(len(progs)); ok && rel%4 == 0 && len(b.copies) == 0 {
			for i, p := range progs {
				if p.Type != elf.PT_NOTE || p.Align != 4 || p.Filesz == 0 || p.Filesz%4 != 0 {
					continue
				}
				for _, bl := range L.blobs {
					if p.Off >= bl.lo && p.Off < bl.hi && bl.rel+(p.Off-bl.lo)+p.Filesz == rel {
						noteAt, adopted = i, true
					}
				}
			}
		}
		if !adopted {
			noteAt = len(progs)
			progs = append(progs, elf.ProgHeader{Type: elf.PT_NOTE, Flags: elf.PF_R, Align: 4})
		}
	}
	if !adopted {
		if L.blobs, rel, L.moveSht, ok = layoutBlobs(len(progs)); !ok {
			return nil, false, nil
		}
	}
	// The rewritten tables are carried bytes: a later edit carries them
	// into its region, as it does the tables that moved.
	for _, c := range b.copies {
		rel = alignUp(rel, 8)
		L.copyRel = append(L.copyRel, rel)
		rel += uint64(len(c.data))
	}
	L.phSize = uint64(len(progs)) * ps
	if phdrIn {
		L.phRel = regionHeader
	}
	L.carryEnd = rel
	var areaOff []uint64
	if noteAt >= 0 {
		rel = alignUp(rel, 4)
		L.noteRel = rel
		for _, a := range ne.area {
			areaOff = append(areaOff, rel-L.noteRel)
			rel += uint64(len(a.b))
		}
		L.noteSize = rel - L.noteRel
	}
	// Tables that moved with the blobs are repointed in .dynamic.
	blobAddr := func(addr uint64) (uint64, bool) {
		o, ok := f.vaddrToOff(addr, 0)
		if !ok {
			return 0, false
		}
		for _, bl := range L.blobs {
			if o >= bl.lo && o < bl.hi {
				return bl.rel + (o - bl.lo), true
			}
		}
		return 0, false
	}
	if err := b.checkPointers(live, blobAddr); err != nil {
		return nil, false, err
	}
	remapped := false
	for _, d := range b.ents {
		if _, ok := blobAddr(d.val); ok && addrTags[d.tag] {
			remapped = true
		}
	}
	if remapped && !phdrIn && f.selfRelocating() {
		// A static PIE or ld.so relocates itself through _DYNAMIC, a
		// link-time address: its .dynamic, and the tables it points to,
		// must stay where they are. The table moves instead.
		return nil, false, nil
	}
	L.moveStr = b.dynChanged && (b.sl.grown || len(b.sl.overwrites)+len(b.sl.scrub) > 0) || live.contains(f.strOff)
	// A string table that starts in a moved blob but runs past it (its
	// section header says less than DT_STRSZ) is copied whole instead.
	if r, ok := blobAddr(f.strAddr); ok {
		if _, whole := blobAddr(f.strAddr + uint64(len(f.strtab)) - 1); !whole || len(f.strtab) == 0 {
			L.moveStr = true
		} else if r2, _ := blobAddr(f.strAddr + uint64(len(f.strtab)) - 1); r2-r != uint64(len(f.strtab))-1 {
			L.moveStr = true
		}
	}
	L.moveDyn = b.dynChanged || L.moveStr || remapped || len(b.copies) > 0 || (f.dynProg >= 0 && live.contains(f.Progs[f.dynProg].Off))
	L.moveInterp = b.interpChanged || (f.interpProg >= 0 && live.contains(f.Progs[f.interpProg].Off))
	if L.moveInterp {
		L.interpRel = rel
		rel += uint64(len(b.interp)) + 1
	}
	L.dynSlots = len(f.Dynamic)
	if L.moveDyn {
		rel = alignUp(rel, es)
		L.dynRel = rel
		L.dynSlots = len(b.ents) + 1 + spareDynSlots
		rel += uint64(L.dynSlots) * es
	}
	if L.moveStr {
		L.strRel = rel
		rel += b.sl.size()
	}
	L.segSize = rel
	// The unloaded tail: a copy of the section name table when a name was
	// added (or it lives in the live region), then the section header
	// table when it grows, shrinks or lived in the live region.
	//
	// An ET_EXEC file takes the copy in any case, so that a section lies
	// after the tables the region holds: patchelf (0.9 to 0.19) takes such
	// a file through rewriteSectionsExecutable, which asserts that a
	// section follows the last one it replaces ("lastReplaced + 1 <
	// shdrs.size()") and aborts when that is the region's .dynstr, as a
	// longer RUNPATH set after ours would make it. The name table is a
	// section patchelf never replaces.
	shstrSec := -1
	if h.Shstrndx > 0 && h.Shstrndx < len(f.Sections) {
		shstrSec = h.Shstrndx
	}
	var shstr []byte
	if ne != nil && ne.shstr != nil {
		shstr = ne.shstr
	} else if shstrSec >= 0 && f.Sections[shstrSec].Type != elf.SHT_NOBITS && (live.contains(f.Sections[shstrSec].Offset) || h.Type == elf.ET_EXEC) {
		s := f.Sections[shstrSec]
		var err error
		if shstr, err = readAt(f.r, f.size, s.Offset, s.Size, "section name table"); err != nil {
			return nil, false, err
		}
	}
	L.total = L.segSize
	if shstr != nil {
		L.shstrRel = L.total
		L.total += uint64(len(shstr))
	}
	L.moveSht = L.moveSht || phdrIn || live.contains(h.Shoff) || ne != nil && ne.count
	L.shRel = alignUp(L.total, 8)
	if len(secs) > 0 && L.moveSht {
		L.total = L.shRel + uint64(len(secs))*uint64(f.shdrSize())
	}

	// Placement: after everything else in the file and in memory, in the
	// free slot before the live region when it fits, else after it.
	A := maxPageSize(h.Machine)
	var maxEnd uint64
	firstLoad := -1
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
		// A segment that claims bytes past the end of the file would also
		// claim the appended region, and the overlap would make its
		// addresses ambiguous.
		if p.Off > uint64(f.size) || p.Filesz > uint64(f.size)-p.Off {
			return nil, false, formatErr(int64(f.Header.Phoff)+int64(i)*int64(f.phdrSize()), "PT_LOAD[%d] file range 0x%x+0x%x lies past the end of the file: nothing can be appended", i, p.Off, p.Filesz)
		}
	}
	// Nothing else may claim the new segment's addresses either: other
	// program headers (a PT_DYNAMIC or PT_GNU_RELRO outside every PT_LOAD
	// in a broken file) and allocated sections.
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
	// The new segment goes above everything, and every sum after this
	// must not overflow. ia64 puts data at 0x6000000000000000 (patchelf's
	// tests/no-rpath-ia64): a 64-bit file may use addresses up to 2^63.
	limit := uint64(1) << 62
	if f.Header.Class == elf.ELFCLASS64 {
		limit = 1 << 63
	}
	if maxEnd > limit {
		return nil, false, formatErr(-1, "segments end at 0x%x: no address space left for a new segment", maxEnd)
	}
	memStart := alignUp(maxEnd, A)
	fl := f.Progs[firstLoad]
	delta := fl.Vaddr - fl.Off
	// With the table in the region, an executable's region must be mapped
	// with the first PT_LOAD's vaddr-offset: kernels before 5.18 compute
	// AT_PHDR as that plus e_phoff.
	exec := phdrIn && f.isExecutable()
	if exec && delta%A != 0 {
		return nil, false, formatErr(-1, "first PT_LOAD vaddr-offset 0x%x is not a multiple of the page size 0x%x", delta, A)
	}
	place := func(from uint64) (off, vaddr uint64) {
		if exec {
			off = alignUp(from, A)
			if memStart >= delta && memStart-delta > off {
				off = memStart - delta
			}
			return off, off + delta
		}
		off = alignUp(from, 16)
		return off, memStart + off%A
	}
	atEnd := live != nil && live.end == uint64(f.size)
	var off, vaddr uint64
	switch {
	case live == nil:
		off, vaddr = place(uint64(f.size))
	case atEnd:
		off, vaddr = place(live.base)
		if off+L.total > live.off {
			off, vaddr = place(live.end)
		}
	default:
		off, vaddr = place(uint64(f.size))
	}
	// The hole before an executable's region (kept sparse) spans its .bss;
	// anything beyond 1 GiB comes from addresses no real file has.
	if off > uint64(f.size)+maxHole {
		return nil, false, formatErr(-1, "a new segment would start 0x%x bytes past the end of the file", off-uint64(f.size))
	}
	if vaddr < memStart {
		return nil, false, formatErr(-1, "first PT_LOAD's vaddr 0x%x and offset 0x%x leave no place for a new segment above the others", fl.Vaddr, fl.Off)
	}
	if off+L.total < off || vaddr+L.segSize < vaddr || (h.Class == elf.ELFCLASS32 && (vaddr+L.segSize > 1<<32 || off+L.total > 1<<32)) {
		return nil, false, formatErr(-1, "no room for a new segment in the address space")
	}

	flags := elf.PF_R
	if L.moveDyn {
		flags |= elf.PF_W // glibc before 2.35 writes DT_DEBUG into .dynamic
	}
	// Relocate what lies in moved blobs, then point at the moved tables.
	reloc := func(o uint64) (uint64, bool) {
		for _, bl := range L.blobs {
			if o >= bl.lo && o < bl.hi {
				return bl.rel + (o - bl.lo), true
			}
		}
		return 0, false
	}
	for i := range progs {
		p := &progs[i]
		if i == loadAt {
			continue
		}
		if i == noteAt && !adopted {
			p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz = off+L.noteRel, vaddr+L.noteRel, vaddr+L.noteRel, L.noteSize, L.noteSize
			continue
		}
		if i == noteAt {
			p.Filesz += L.noteSize
			p.Memsz += L.noteSize
		}
		if r, ok := reloc(p.Off); ok && p.Type != elf.PT_LOAD {
			p.Off, p.Vaddr, p.Paddr = off+r, vaddr+r, vaddr+r
		}
		switch p.Type {
		case elf.PT_PHDR:
			if phdrIn {
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
	progs[loadAt] = elf.ProgHeader{Type: elf.PT_LOAD, Flags: flags, Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: L.segSize, Memsz: L.segSize, Align: A}

	buf := f.scratch(L.total)
	copy(buf, regionMagic[:])
	base := uint64(f.size)
	if live != nil {
		base = live.base
	}
	f.order.PutUint64(buf[8:], base)
	f.order.PutUint64(buf[16:], L.carryEnd-carryRel)
	if phdrIn {
		f.order.PutUint64(buf[24:], regionPhdrs)
	}
	for _, bl := range L.blobs {
		if err := f.readFull(buf[bl.rel:bl.rel+(bl.hi-bl.lo)], bl.lo, "moved section"); err != nil {
			return nil, false, err
		}
	}
	if L.moveInterp {
		// A copy of the interpreter that came with the moved blobs (or the
		// carried bytes of the live region) is dead once PT_INTERP points at
		// interpRel: clear it, or a replaced loader's store path stays in
		// the file (and the closure), now or after the next edit.
		// Only the bytes no other section claims (interpOwn).
		for _, o := range f.interpOwn() {
			if r, ok := reloc(o.lo); ok {
				clear(buf[r:min(r+(o.hi-o.lo), L.carryEnd)])
			}
		}
	}
	if L.moveStr {
		// Likewise a copy of the replaced string table.
		if r, ok := reloc(f.strOff); ok {
			clear(buf[r:min(r+uint64(len(f.strtab)), L.carryEnd)])
		}
	}
	// And removed notes that came along.
	var zero []rng
	if ne != nil {
		for _, z := range ne.zero {
			if r, ok := reloc(z.lo); ok {
				clear(buf[r:min(r+z.hi-z.lo, L.carryEnd)])
			} else {
				zero = append(zero, z)
			}
		}
	}
	if phdrIn {
		for i, p := range progs {
			f.encodeProg(buf[L.phRel+uint64(i)*ps:], p)
		}
	}
	if L.moveInterp {
		copy(buf[L.interpRel:], b.interp)
	}
	strAddr, strSize := f.strAddr, uint64(len(f.strtab))
	if L.moveStr {
		b.sl.copyTo(buf[L.strRel : L.strRel+b.sl.size()])
		strAddr, strSize = vaddr+L.strRel, b.sl.size()
	}
	if L.moveDyn {
		for i, d := range b.ents {
			if r, ok := blobAddr(d.val); ok && addrTags[d.tag] && d.tag != elf.DT_STRTAB {
				b.ents[i].val = vaddr + r
			}
		}
		if r, ok := blobAddr(f.strAddr); ok && !L.moveStr {
			strAddr = vaddr + r
		}
		for k, c := range b.copies {
			copy(buf[L.copyRel[k]:], c.data)
			for i, d := range b.ents {
				if d.tag == c.tag {
					b.ents[i].val = vaddr + L.copyRel[k]
				}
			}
		}
		copy(buf[L.dynRel:], b.dynBytes(strAddr, strSize, L.dynSlots))
	}
	areaSec := map[int]int{}
	if noteAt >= 0 {
		for a, n := range ne.area {
			copy(buf[L.noteRel+areaOff[a]:], n.b)
			if n.sec >= 0 {
				areaSec[n.sec] = a
			}
		}
	}
	if shstr != nil {
		copy(buf[L.shstrRel:], shstr)
	}
	var sht []byte
	moves := map[int]sectionMove{}
	var secMap []int
	if ne != nil && ne.count {
		secMap = ne.secMap
	}
	renumbered := secMap != nil
	if len(secs) > 0 {
		final := make([]Section, len(secs))
		dynstrSec := f.dynstrSection()
		for j, s := range secs {
			oi := orig[j]
			before := s
			if oi >= 0 {
				before = f.Sections[oi]
			}
			relocated := false
			// An empty section keeps its place (it may as well end the
			// section before the moved bytes), except the interpreter's,
			// which follows PT_INTERP whatever its size.
			if r, ok := reloc(s.Offset); ok && (s.Size > 0 || oi >= 0 && f.isInterpSection(before)) {
				// Only whole sections move: one that runs past the
				// moved bytes would be described over what follows them.
				if e, ok := reloc(s.Offset + s.Size - 1); s.Type != elf.SHT_NOBITS && s.Size > 0 && (!ok || e != r+s.Size-1) {
					return nil, false, formatErr(-1, "section %d %s (0x%x+0x%x) lies partly in the bytes that move out of the program header table's way", oi, s.Name, s.Offset, s.Size)
				}
				s.Offset, s.Addr = off+r, vaddr+r
				relocated = true
			}
			a, isArea := areaSec[j]
			switch {
			case isArea:
				n := uint64(len(ne.area[a].b))
				s.Offset, s.Addr, s.Size = off+L.noteRel+areaOff[a], vaddr+L.noteRel+areaOff[a], n
				s.Type, s.Flags, s.Addralign = elf.SHT_NOTE, s.Flags|elf.SHF_ALLOC, 4
			case L.moveStr && oi >= 0 && oi == dynstrSec:
				s.Offset, s.Addr, s.Size = off+L.strRel, strAddr, strSize
			case oi >= 0 && before.Flags&elf.SHF_ALLOC != 0 && slices.ContainsFunc(b.copies, func(c *tableCopy) bool { return c.secType == before.Type && c.addr == before.Addr }):
				k := slices.IndexFunc(b.copies, func(c *tableCopy) bool { return c.secType == before.Type && c.addr == before.Addr })
				s.Offset, s.Addr, s.Size = off+L.copyRel[k], vaddr+L.copyRel[k], uint64(len(b.copies[k].data))
			case L.moveDyn && s.Type == elf.SHT_DYNAMIC:
				s.Offset, s.Addr, s.Size = off+L.dynRel, vaddr+L.dynRel, uint64(L.dynSlots)*es
			case L.moveInterp && oi >= 0 && f.isInterpSection(before):
				s.Offset, s.Addr, s.Size = off+L.interpRel, vaddr+L.interpRel, uint64(len(b.interp))+1
			case shstr != nil && j == shstrndx:
				s.Offset, s.Size = off+L.shstrRel, uint64(len(shstr))
			default:
				// A loaded section of the live region that none of the
				// above places (a type the layout does not know, in the
				// note area it rebuilds) would keep an address the new
				// region maps to other bytes.
				if !relocated && oi >= 0 && live != nil && before.Flags&elf.SHF_ALLOC != 0 && before.Type != elf.SHT_NOBITS && before.Size > 0 && live.contains(before.Offset) {
					return nil, false, formatErr(-1, "section %d %s (type %v) in the region an earlier edit added cannot be moved to the new one", oi, before.Name, before.Type)
				}
			}
			if oi >= 0 && (before.Flags&elf.SHF_ALLOC != 0 || isArea) && s.Addr != before.Addr {
				moves[oi] = sectionMove{before.Addr, before.Size, s.Addr}
			}
			final[j] = s
		}
		from := slices.Clone(orig) // the original of each final header, -1 if new
		if sorted, pos, ok := f.sortSections(final, len(progs)); ok {
			final = sorted
			if shstrndx >= 0 && shstrndx < len(pos) {
				shstrndx = pos[shstrndx]
			}
			for j, k := range pos {
				from[k] = orig[j]
			}
			if secMap == nil {
				secMap = make([]int, len(f.Sections))
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
			secMap, renumbered = composed, true
		}
		sht = make([]byte, len(final)*int(f.shdrSize()))
		for j, s := range final {
			copy(sht[j*int(f.shdrSize()):], f.encodeSection(s))
		}
		at := h.Shoff
		if L.moveSht {
			copy(buf[L.shRel:], sht)
			at = off + L.shRel
		}
		// Each header is its original with a few fields changed, at
		// another index when they were sorted.
		for k, oi := range from {
			if oi >= 0 {
				es := uint64(f.shdrSize())
				b.hint(at+uint64(k)*es, h.Shoff+uint64(oi)*es, es)
			}
		}
	}
	symSteps, dynsymEdits := f.fixSymbols(moves, secMap)
	for _, st := range dynsymEdits {
		if r, ok := reloc(uint64(st.Off)); ok {
			copy(buf[r:], st.data)
		} else {
			symSteps = append(symSteps, st)
		}
	}
	b.add(StepUnused, "region: moved tables", off, buf)
	for _, bl := range L.blobs {
		b.hint(off+bl.rel, bl.lo, bl.hi-bl.lo)
	}
	if L.moveStr {
		b.hint(off+L.strRel, f.strOff, b.sl.limit)
	}
	shoff := h.Shoff
	if len(secs) > 0 {
		if L.moveSht {
			shoff = off + L.shRel
		} else {
			b.add(StepNeutral, "section header table", h.Shoff, sht)
		}
	}
	b.steps = append(b.steps, symSteps...)
	ehdr := slices.Clone(f.rawEhdr)
	setShnum := func(hdr []byte) {
		if renumbered {
			f.putShnum(hdr, len(secs), shstrndx)
		}
	}
	if phdrIn {
		f.putEhdr(ehdr, off+L.phRel, len(progs), shoff)
		setShnum(ehdr)
		b.add(StepCommit, "ELF header: new program header table", 0, ehdr)
	} else {
		// The ELF header and the program header table are written together:
		// one write switches PT_INTERP, PT_DYNAMIC, PT_NOTE and e_phnum at
		// once.
		f.putEhdr(ehdr, h.Phoff, len(progs), shoff)
		setShnum(ehdr)
		head, err := readAt(f.r, f.size, 0, h.Phoff, "bytes before the program header table")
		if err != nil {
			return nil, false, err
		}
		copy(head, ehdr)
		// A table that shrank is followed by zeros up to its old end.
		tbl := make([]byte, max(L.phSize, uint64(h.Phnum)*ps))
		for i, p := range progs {
			f.encodeProg(tbl[uint64(i)*ps:], p)
		}
		b.add(StepCommit, "ELF header and program header table", 0, append(head, tbl...))
	}

	// Only a table that moves is dead: one that stays may share a dropped
	// string with a version reference (DT_NEEDED and vn_file "libc.so.6"),
	// and its unshared dead strings are already scrubbed in place. A table
	// in the live region goes with it.
	if L.moveStr && !live.contains(f.strOff) {
		b.scrubOld()
	}
	tblEnd := h.Phoff + max(L.phSize, uint64(h.Phnum)*ps)
	if phdrIn {
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
			if _, moved := reloc(o.lo); !moved {
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
	newSize := max(int64(off+L.total), f.size)
	if live != nil {
		if atEnd && off+L.total <= live.off {
			newSize = int64(off + L.total)
			b.steps = append(b.steps, Step{Kind: StepTruncate, What: "drop the old region", Len: newSize})
		} else {
			b.add(StepHygiene, "zero the old region", live.off, zeros(live.end-live.off))
		}
	}
	return b.finish(Region, newSize), true, nil
}

// sectionMove is where a plan moves an allocated section: its old address
// and size, and its new address.
type sectionMove struct{ addr, size, newAddr uint64 }

// fixSymbols moves the .symtab symbols defined in moved sections along with
// them: section symbols, _DYNAMIC, __abi_tag and the like. Only tools read
// them (eu-elflint checks that each lies inside its section; gdb uses
// them); the loaders use PT_DYNAMIC and .dynsym, whose values are left
// alone. With secMap (old section index to new, -1 for a section that
// goes) it also renumbers st_shndx in .symtab and .dynsym, which the
// loaders read only to tell undefined and absolute symbols apart (neither
// changes). It returns the writes to .symtab and, separately, those to
// .dynsym, which a region layout may have moved. A table that cannot be
// read is skipped. A secMap that keeps every index (a note header added at
// the end of unsorted headers) renumbers nothing, and .dynsym, megabytes in
// LLVM, is not read for it.
func (f *File) fixSymbols(moves map[int]sectionMove, secMap []int) (symtab, dynsym []Step) {
	if identity(secMap) {
		secMap = nil
	}
	if len(moves) == 0 && secMap == nil {
		return nil, nil
	}
	es, valOff, valLen, ndxOff := uint64(sym64Size), 8, 8, 6
	if f.Header.Class == elf.ELFCLASS32 {
		es, valOff, valLen, ndxOff = sym32Size, 4, 4, 14
	}
	// _DYNAMIC is absolute in some links (aarch64 GNU ld): it is found by
	// its value and name, and moves with .dynamic.
	dynMove, hasDyn := sectionMove{}, false
	for i, mv := range moves {
		if f.Sections[i].Type == elf.SHT_DYNAMIC {
			dynMove, hasDyn = mv, true
		}
	}
	for _, s := range f.Sections {
		isDynsym := s.Type == elf.SHT_DYNSYM
		if s.Type != elf.SHT_SYMTAB && !(isDynsym && secMap != nil) || s.Entsize != es || s.Size == 0 {
			continue
		}
		var names []byte
		isDynamic := func(e []byte) bool {
			if names == nil && int(s.Link) < len(f.Sections) {
				l := f.Sections[s.Link]
				names, _ = readAt(f.r, f.size, l.Offset, l.Size, "symbol names")
			}
			name, _ := cstring(names, uint64(f.order.Uint32(e)))
			return name == "_DYNAMIC"
		}
		var steps []Step
		n := s.Size / es
		// Symbols per read: a huge table is not read at once, and a big one
		// (node: 2.6 MiB of .symtab) not in a hundred reads either.
		chunk := uint64(1<<20) / es
		// One buffer for the chunks, read over until a step takes a
		// slice of one (a chunk where nothing moved or was renumbered).
		var buf []byte
		for i := uint64(0); i < n; i += chunk {
			m := min(chunk, n-i)
			if buf == nil {
				buf = f.scratchToRead(min(chunk, n) * es)
			}
			raw, at := buf[:m*es], s.Offset+i*es
			if at > uint64(f.size) || m*es > uint64(f.size)-at {
				break // past the end of the file: readAt's check
			}
			if _, err := f.r.ReadAt(raw, int64(at)); err != nil {
				break
			}
			taken := len(steps)
			// A run of changed symbols takes in the unchanged ones
			// between changes less than a page apart (their bytes as
			// they are): one write instead of many, and no page written
			// that the changes would not dirty anyway (mergeGap).
			runLo, runHi := -1, -1
			flush := func() {
				if runLo >= 0 {
					steps = append(steps, Step{Kind: StepNeutral, What: "symbols renumbered or moved with their sections",
						Off: int64(s.Offset + (i+uint64(runLo))*es), Len: int64(uint64(runHi-runLo) * es), data: raw[uint64(runLo)*es : uint64(runHi)*es]})
					runLo = -1
				}
			}
			for j := uint64(0); j < m; j++ {
				e := raw[j*es : (j+1)*es]
				changed := false
				ndx := elf.SectionIndex(f.order.Uint16(e[ndxOff:]))
				if !isDynsym {
					var v uint64
					if valLen == 8 {
						v = f.order.Uint64(e[valOff:])
					} else {
						v = uint64(f.order.Uint32(e[valOff:]))
					}
					mv, ok := moves[int(ndx)]
					if ndx == elf.SHN_ABS && hasDyn && v == dynMove.addr && isDynamic(e) {
						mv, ok = dynMove, true
					}
					if ok && (ndx < elf.SHN_LORESERVE || ndx == elf.SHN_ABS) && v >= mv.addr && v-mv.addr <= mv.size {
						if valLen == 8 {
							f.order.PutUint64(e[valOff:], mv.newAddr+(v-mv.addr))
						} else {
							f.order.PutUint32(e[valOff:], uint32(mv.newAddr+(v-mv.addr)))
						}
						changed = true
					}
				}
				if secMap != nil && ndx > 0 && ndx < elf.SHN_LORESERVE && int(ndx) < len(secMap) && secMap[ndx] != int(ndx) {
					switch to := secMap[ndx]; {
					case to >= 0:
						f.order.PutUint16(e[ndxOff:], uint16(to))
						changed = true
					case !isDynsym:
						// Its section went (a removed note): tools see an
						// absolute symbol rather than one in a wrong section.
						f.order.PutUint16(e[ndxOff:], uint16(elf.SHN_ABS))
						changed = true
					}
				}
				if !changed {
					continue
				}
				if runLo >= 0 && (j-uint64(runHi))*es >= mergeGap {
					flush()
				}
				if runLo < 0 {
					runLo = int(j)
				}
				runHi = int(j) + 1
			}
			flush()
			if len(steps) > taken {
				buf = nil // the steps hold slices of it
			}
		}
		if isDynsym {
			dynsym = append(dynsym, steps...)
		} else {
			symtab = append(symtab, steps...)
		}
	}
	return symtab, dynsym
}
