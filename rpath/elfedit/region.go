package elfedit

import (
	"bytes"
	"debug/elf"
	"fmt"
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
	// relocateProgs). A last segment with zero-filled memory past its bytes
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
		if p, ok, err := b.layRegion(false); ok || err != nil {
			return p, err
		}
	}
	p, _, err := b.layRegion(true)
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
		first, inBlob := blobAddr(d.val)
		if inBlob && addrTags[d.tag] {
			// Repointed: every byte the loader reads of the table must
			// move with its first. A section header that lies about the
			// table (a mangled file) can make a blob hold part of it.
			n, err := f.tableExtent(d.tag, d.val)
			if err != nil {
				return fmt.Errorf("%v 0x%x points into bytes the edit would move: %w", d.tag, d.val, err)
			}
			if last, ok := blobAddr(d.val + max(n, 1) - 1); !ok || last != first+max(n, 1)-1 {
				return formatErr(-1, "%v 0x%x: its table (0x%x bytes) runs past the bytes the edit would move", d.tag, d.val, n)
			}
			continue
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
	merged := union(overlapClosure(f.movableRanges(), gap))
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
	if !f.gapIsPadding(gap, merged, moveSht) {
		return nil, false, false
	}
	var out []blob
	for _, m := range merged {
		out = append(out, blob{lo: m.lo, hi: m.hi})
	}
	return out, moveSht, true
}

// movableRanges are the file ranges gapBlobs may move: PT_INTERP,
// PT_NOTE, PT_GNU_PROPERTY and the sections movableSection allows.
// Nothing that code or relocations refer to.
func (f *File) movableRanges() []rng {
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
	return movable
}

// overlapClosure is the ranges of movable that overlap gap, and those
// that overlap them, transitively.
func overlapClosure(movable []rng, gap rng) []rng {
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
	return set
}

// gapIsPadding reports whether the bytes of gap outside the moved ranges
// (and the section header table, when it moves) are zero padding: the
// only evidence there is in a file without sections.
func (f *File) gapIsPadding(gap rng, moved []rng, moveSht bool) bool {
	h := f.Header
	pad, err := readAt(f.r, f.size, gap.lo, gap.hi-gap.lo, "program header gap")
	if err != nil {
		return false
	}
	for i, c := range pad {
		at := gap.lo + uint64(i)
		inSht := moveSht && at >= h.Shoff && at < h.Shoff+uint64(h.Shnum)*uint64(h.Shentsize)
		if c != 0 && !inSht && !slices.ContainsFunc(moved, func(m rng) bool { return at >= m.lo && at < m.hi }) {
			return false
		}
	}
	return true
}

// sectionMove is where a plan moves an allocated section: its old address
// and size, and its new address.
type sectionMove struct{ addr, size, newAddr uint64 }

// symFixer changes one symbol table entry at a time for fixSymbols.
type symFixer struct {
	f                      *File
	moves                  map[int]sectionMove
	secMap                 []int
	valOff, valLen, ndxOff int
	dynMove                sectionMove // .dynamic's move, when hasDyn
	hasDyn                 bool
}

// move moves the value of .symtab entry e with its section (or with
// .dynamic, for an absolute _DYNAMIC) and reports whether it did.
func (sf *symFixer) move(e []byte, isDynamic func([]byte) bool) bool {
	o := sf.f.order
	ndx := elf.SectionIndex(o.Uint16(e[sf.ndxOff:]))
	var v uint64
	if sf.valLen == 8 {
		v = o.Uint64(e[sf.valOff:])
	} else {
		v = uint64(o.Uint32(e[sf.valOff:]))
	}
	mv, ok := sf.moves[int(ndx)]
	if ndx == elf.SHN_ABS && sf.hasDyn && v == sf.dynMove.addr && isDynamic(e) {
		mv, ok = sf.dynMove, true
	}
	if !ok || !(ndx < elf.SHN_LORESERVE || ndx == elf.SHN_ABS) || v < mv.addr || v-mv.addr > mv.size {
		return false
	}
	if sf.valLen == 8 {
		o.PutUint64(e[sf.valOff:], mv.newAddr+(v-mv.addr))
	} else {
		o.PutUint32(e[sf.valOff:], uint32(mv.newAddr+(v-mv.addr)))
	}
	return true
}

// renumber points entry e's st_shndx at its section's new index and
// reports whether it changed it. A .symtab symbol whose section went (a
// removed note) becomes absolute: tools see that rather than a symbol in
// a wrong section.
func (sf *symFixer) renumber(e []byte, isDynsym bool) bool {
	o, secMap := sf.f.order, sf.secMap
	ndx := elf.SectionIndex(o.Uint16(e[sf.ndxOff:]))
	if secMap == nil || ndx == 0 || ndx >= elf.SHN_LORESERVE || int(ndx) >= len(secMap) || secMap[ndx] == int(ndx) {
		return false
	}
	switch to := secMap[ndx]; {
	case to >= 0:
		o.PutUint16(e[sf.ndxOff:], uint16(to))
	case !isDynsym:
		o.PutUint16(e[sf.ndxOff:], uint16(elf.SHN_ABS))
	default:
		return false
	}
	return true
}

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
	sf := &symFixer{f: f, moves: moves, secMap: secMap, valOff: 8, valLen: 8, ndxOff: 6}
	es := uint64(sym64Size)
	if f.Header.Class == elf.ELFCLASS32 {
		es, sf.valOff, sf.valLen, sf.ndxOff = sym32Size, 4, 4, 14
	}
	// _DYNAMIC is absolute in some links (aarch64 GNU ld): it is found by
	// its value and name, and moves with .dynamic.
	for i, mv := range moves {
		if f.Sections[i].Type == elf.SHT_DYNAMIC {
			sf.dynMove, sf.hasDyn = mv, true
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
		// (a large program's .symtab runs to megabytes) not in a hundred
		// reads either.
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
				moved := !isDynsym && sf.move(e, isDynamic)
				if renumbered := sf.renumber(e, isDynsym); !moved && !renumbered {
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
